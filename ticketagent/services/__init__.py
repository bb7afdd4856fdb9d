"""Operator and upload actions on tasks and items: `<entity>_<action>()` functions.

`tasks` (create, pause, cancel, finish), `resume` (dry-run, resume, new task
from unfinished items), `items` (requeue, continue after review, approval),
`upload` (a validated batch becomes a task). The worker's side of an item is
`ticketagent.pipeline`.
"""

from ticketagent.errors import ServiceError

__all__ = ["ServiceError"]
