"""The RT side of the Request Tracker channel as an RT data file: custom field, group, rights.

    rt_datafile(user="agent", queues=["General"], escalation_queue="Escalations")

gives the text of a data file for RT's own loader, which an RT administrator
applies on the RT host:

    rt-setup-database-5 --action insert --datafile ticketagent-rt.pm

(upstream RT calls it `sbin/rt-setup-database`). REST2 cannot create custom
fields, groups or rights, so this is the recipe. It runs as one `@Initial`
action through RT's own API, and only adds what is missing, so the file may
be applied again (after adding a queue, say).

It relies on what RT's administrator keeps: the user the agent acts as, the
queues it acts in, the escalation queue and the escalation owner
(`setup_needs`, each with where it was configured). Those are checked first,
all of them, and when one is missing or disabled the file stops before
changing anything, naming each and where it is configured. It creates none
of them: a mistyped escalation queue would otherwise become a new queue that
nobody watches. The failure does not rest on the loader's reporting: RT's
loader logs a failed `@Final` action and exits 0, while a failed `@Initial`
action makes it exit non-zero (RT 5's `RT::Handle::InsertData`); and
`manage.py rt-setup` checks the same names through REST2 before it writes
the file (`rt_setup_check`).

Then it creates the transaction custom field (`FreeformSingle`) and applies
it to every queue named, the group, makes the user a member, and grants the
group `rt_check.QUEUE_RIGHTS` in every queue and `ESCALATION_RIGHTS` in the
escalation queue too; an escalation owner gets OwnTicket and the group
StealTicket.
"""

import re
from dataclasses import dataclass

from ticketagent.channels.rt_check import ESCALATION_RIGHTS, QUEUE_RIGHTS

DEFAULT_GROUP = "Ticket agents"
OWNER_RIGHTS = ("OwnTicket",)  # for the escalation owner, in every queue named
STEAL_RIGHTS = ("StealTicket", "OwnTicket")  # for the group when escalate names an owner
_NAME = re.compile(r"[^\x00-\x1f'\\]{1,200}")
# where each name comes from when no other place is said: `manage.py rt-setup`'s flags
FLAGS = {"user": "--user", "queues": "--queue", "escalation_queue": "--escalation-queue",
         "escalation_owner": "--escalation-owner"}


class SetupError(ValueError):
    """A name that cannot go into the data file; the message names it."""


@dataclass(frozen=True)
class Needed:
    """A user or queue the data file relies on: `kind` ("user" or "queue"), its `name`, `what` it is to the
    agent and `where` it is configured (a flag or a setting)."""

    kind: str
    name: str
    what: str
    where: str

    def missing(self, how: str = "does not exist in RT") -> str:
        return f"{self.what} {self.name!r} ({self.where}) {how}"


def setup_needs(*, user: str, queues: list[str], escalation_queue: str, escalation_owner: str = "",
                where: dict | None = None) -> list[Needed]:
    """Every user and queue a data file for these names relies on, in the order the file checks them."""
    where = {**FLAGS, **(where or {})}
    needs = [Needed("user", user, "the RT user the agent acts as", where["user"])]
    needs += [Needed("queue", q, "the queue", where["queues"]) for q in dict.fromkeys(queues)
              if q != escalation_queue]
    if escalation_queue:
        needs.append(Needed("queue", escalation_queue, "the escalation queue", where["escalation_queue"]))
    if escalation_owner:
        needs.append(Needed("user", escalation_owner, "the escalation owner", where["escalation_owner"]))
    return needs


def _perl(value: str, what: str) -> str:
    if not _NAME.fullmatch(value or ""):
        raise SetupError(f"{what} {value!r} cannot be used: it must be 1-200 characters without quotes, "
                         "backslashes or control characters")
    return f"'{value}'"


def _words(names) -> str:
    return "[qw(" + " ".join(names) + ")]"


def rt_datafile(*, user: str, queues: list[str], escalation_queue: str, custom_field: str = "IdempotencyKey",
                group: str = DEFAULT_GROUP, escalation_owner: str = "", where: dict | None = None) -> str:
    """The data file's text (Perl, as RT's loader reads it); `where` names where each of `FLAGS` was configured."""
    if not queues and not escalation_queue:
        raise SetupError("name at least one queue the agent acts in (--queue) or RT_ESCALATION_QUEUE")
    named = list(dict.fromkeys([*queues, *([escalation_queue] if escalation_queue else [])]))
    queue_list = ", ".join(_perl(q, "the queue") for q in named)
    esc = _perl(escalation_queue, "the escalation queue") if escalation_queue else "undef"
    owner = _perl(escalation_owner, "the escalation owner") if escalation_owner else "undef"
    needs = setup_needs(user=user, queues=queues, escalation_queue=escalation_queue,
                        escalation_owner=escalation_owner, where=where)
    checks = ",\n        ".join(
        f"[{_perl(n.kind, 'a kind')}, {_perl(n.name, n.what)}, {_perl(n.what, 'a label')}, {_perl(n.where, 'a label')}]"
        for n in needs)
    return _TEMPLATE.format(
        user=_perl(user, "the RT user"), group=_perl(group, "the group"), cf=_perl(custom_field, "the custom field"),
        queues=queue_list, escalation=esc, owner=owner, queue_rights=_words(QUEUE_RIGHTS),
        escalation_rights=_words(ESCALATION_RIGHTS), owner_rights=_words(OWNER_RIGHTS),
        steal_rights=_words(STEAL_RIGHTS), checks=checks)


_TEMPLATE = """# What the ticket agent needs in Request Tracker; written by `manage.py rt-setup`.
# Apply on the RT host:  rt-setup-database-5 --action insert --datafile THIS-FILE
# Safe to apply again: it only adds what is missing. Each step prints one line "ticketagent: ...".
# It first checks that every user and queue below exists (it creates none of them); if one does not, it
# changes nothing and the loader stops with "One of initial functions failed", naming each, and exits non-zero.
my %want = (
    user => {user}, group => {group}, custom_field => {cf},
    queues => [{queues}], escalation_queue => {escalation}, escalation_owner => {owner},
    queue_rights => {queue_rights}, escalation_rights => {escalation_rights},
    owner_rights => {owner_rights}, steal_rights => {steal_rights},
    # [kind, name, what it is to the agent, where it is configured]
    needs => [
        {checks}
    ],
);

push @Initial, sub {{
    my $me = RT->SystemUser;
    my $say = sub {{ print "ticketagent: ", @_, "\\n" }};

    my (@missing, %user, %queue);
    for my $need (@{{ $want{{needs}} }}) {{
        my ($kind, $name, $what, $where) = @$need;
        my $record = $kind eq 'user' ? RT::User->new($me) : RT::Queue->new($me);
        $record->Load($name);
        if (!$record->id) {{
            push @missing, "$what '$name' ($where) does not exist in RT";
        }} elsif ($record->Disabled) {{
            push @missing, "$what '$name' ($where) is disabled in RT";
        }} elsif ($kind eq 'user') {{
            $user{{$name}} = $record;
        }} else {{
            $queue{{$name}} = $record;
        }}
    }}
    die "ticketagent: stopped before changing anything: " . join('; ', @missing)
        . ". Create or enable them in RT (or correct where they are configured), then apply this file again\\n"
        if @missing;

    my $grant = sub {{
        my ($principal, $who, $queue, $rights) = @_;
        for my $right (@$rights) {{
            next if $principal->HasRight(Right => $right, Object => $queue);
            my ($ok, $msg) = $principal->GrantRight(Right => $right, Object => $queue);
            die "granting $right in queue " . $queue->Name . " to $who: $msg\\n" unless $ok;
            $say->("granted $right in queue ", $queue->Name, " to $who");
        }}
    }};
    my $user = $user{{ $want{{user}} }};
    my @queues = map {{ $queue{{$_}} }} @{{ $want{{queues}} }};

    my $cf = RT::CustomField->new($me);
    $cf->LoadByName(Name => $want{{custom_field}}, LookupType => RT::Transaction->CustomFieldLookupType);
    unless ($cf->id) {{
        my ($ok, $msg) = $cf->Create(Name => $want{{custom_field}}, Type => 'FreeformSingle',
            LookupType => RT::Transaction->CustomFieldLookupType,
            Description => 'Idempotency key of a write by the ticket agent');
        die "creating custom field $want{{custom_field}}: $msg\\n" unless $ok;
        $say->("created transaction custom field $want{{custom_field}}");
    }}
    for my $queue (@queues) {{
        next if $cf->IsAdded($queue->id);
        my ($ok, $msg) = $cf->AddToObject($queue);
        die "applying $want{{custom_field}} to queue " . $queue->Name . ": $msg\\n" unless $ok;
        $say->("applied $want{{custom_field}} to queue ", $queue->Name);
    }}

    my $group = RT::Group->new($me);
    $group->LoadUserDefinedGroup($want{{group}});
    unless ($group->id) {{
        my ($ok, $msg) = $group->CreateUserDefinedGroup(Name => $want{{group}},
            Description => 'Accounts the ticket agent acts as');
        die "creating group $want{{group}}: $msg\\n" unless $ok;
        $say->("created group $want{{group}}");
    }}
    unless ($group->HasMember($user->PrincipalObj)) {{
        my ($ok, $msg) = $group->AddMember($user->PrincipalId);
        die "adding $want{{user}} to group $want{{group}}: $msg\\n" unless $ok;
        $say->("added $want{{user}} to group $want{{group}}");
    }}

    my $owner = $want{{escalation_owner}} ? $user{{ $want{{escalation_owner}} }} : undef;
    for my $queue (@queues) {{
        my $escalation = $want{{escalation_queue}} && $queue->Name eq $want{{escalation_queue}};
        $grant->($group->PrincipalObj, "group $want{{group}}", $queue, $want{{queue_rights}});
        $grant->($group->PrincipalObj, "group $want{{group}}", $queue, $want{{escalation_rights}}) if $escalation;
        next unless $owner;
        $grant->($group->PrincipalObj, "group $want{{group}}", $queue, $want{{steal_rights}});
        $grant->($owner->PrincipalObj, "user $want{{escalation_owner}}", $queue, $want{{owner_rights}});
    }}
    $say->("ready: $want{{user}} (group $want{{group}}) in queue(s) ", join(', ', map {{ $_->Name }} @queues));
    1;
}};
1;
"""
