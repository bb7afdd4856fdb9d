"""Counting the Redis round trips and commands of this process: the bench's one reach into redis-py.

redis-py has no hook that sees each command a connection sends, so the
counter wraps the send methods of its connection class (the bench only).
"""

from __future__ import annotations


class RedisCounter:
    """Round trips and commands sent by every redis-py connection of this process."""

    def __init__(self):
        from redis.connection import AbstractConnection

        self.round_trips = 0
        self.commands = 0
        original_packed, original_pack_commands = AbstractConnection.send_packed_command, \
            AbstractConnection.pack_commands
        counter = self

        def send_packed_command(conn, command, check_health=True):
            counter.round_trips += 1
            return original_packed(conn, command, check_health)

        def pack_commands(conn, commands):
            commands = list(commands)  # a pipeline's commands, sent as one
            counter.commands += len(commands)
            return original_pack_commands(conn, commands)

        original_send = AbstractConnection.send_command

        def send_command(conn, *args, **kwargs):
            counter.commands += 1
            return original_send(conn, *args, **kwargs)

        AbstractConnection.send_packed_command = send_packed_command
        AbstractConnection.pack_commands = pack_commands
        AbstractConnection.send_command = send_command
