"""Scheduling: the queue, the jobs, the workers, the task windows, recovery and stopping."""
