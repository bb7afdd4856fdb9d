"""`manage.py resume TASK [--dry-run] [--budget AMOUNT]`: what resuming would do, then the resume."""

from django.core.management.base import BaseCommand, CommandError

from ticketagent.llm.prices import dollars
from ticketagent.models import Task
from ticketagent.services import ServiceError
from ticketagent.services.budget import budget_parse
from ticketagent.services.resume import task_dry_run, task_resume


class Command(BaseCommand):
    help = "Show what resuming a task would do (--dry-run), or resume it."

    def add_arguments(self, parser):
        parser.add_argument("task", type=int, help="task id")
        parser.add_argument("--dry-run", action="store_true", help="only show what resuming would do")
        parser.add_argument("--actor", default="cli", help="who resumes (recorded in the event log)")
        parser.add_argument("--budget", default="", metavar="AMOUNT",
                            help="a new budget, in USD (5, $5.00) or tokens (200000tokens), above what the task "
                                 "spent: needed once the task reached its budget")

    def handle(self, *args, task, dry_run=False, actor="cli", budget="", **options):
        if not Task.objects.filter(pk=task).exists():
            raise CommandError(f"task {task} does not exist")
        plan = task_dry_run(task_id=task)
        self.stdout.write(f"{'ticket':<20} {'status':<17} {'resume will':<19} steps  note")
        for entry in plan.items:
            if entry.category == "done":
                continue
            steps = ", ".join(entry.steps) or "-"
            self.stdout.write(f"{entry.ticket_id:<20} {entry.status:<17} {entry.category:<19} {steps}  {entry.note}")
        self.stdout.write("totals: " + ", ".join(f"{k} {v}" for k, v in plan.totals.items()))
        self.stdout.write(f"projected cost of what is left: {dollars(plan.projected_cost)} ({plan.model_items} "
                          f"item(s) still call the model, {len(plan.model_steps)} model step(s); mean of a call so "
                          f"far: {dollars(plan.call_cost)}, from {plan.calls_known} call(s))")
        if plan.budget_reached:
            self.stdout.write("the task reached its budget: resuming needs --budget above what it spent")
        if plan.blocked_reason:
            self.stdout.write(f"cannot resume: {plan.blocked_reason}")
        if dry_run:
            return
        try:
            task_resume(task_id=task, actor=actor, budget=budget_parse(budget))
        except ServiceError as exc:
            raise CommandError(str(exc).replace("budget:", "--budget:", 1)) from None
        self.stdout.write(self.style.SUCCESS(f"task {task} resumed: {plan.will_enqueue} item(s) enqueued"))
