"""What the pipeline and the services tell scheduling, without knowing it (`ticketagent.scheduling.window` listens).

Both are sent by code that does not import the queue: the window connects
its receivers at start (`apps.TicketagentConfig.ready`). Jobs reach Redis
only after the sender's transaction commits.
"""

from django.dispatch import Signal

# Inside the transaction that made a task's items runnable (a new task, a
# requeue, a resume): its window is topped up; the jobs go out on commit.
# kwargs: task_id (int), front (bool: ahead of the jobs already waiting).
items_runnable = Signal()

# Inside the transaction that stops a task (pause, cancel), holding its lock:
# its jobs still waiting leave Redis on commit and its items are marked not
# sent. A receiver answers how many jobs that concerns. kwargs: task_id (int).
task_stopping = Signal()

# After the transaction that took an item's lease has committed: the item
# left its task's window. kwargs: task_id (int), item_id (int).
item_started = Signal()
