"""The RT side of the Request Tracker channel as an RT data file: custom field, escalation queue, group, rights.

    rt_datafile(user="agent", queues=["General"], escalation_queue="Escalations")

gives the text of a data file for RT's own loader, which an RT administrator
applies on the RT host:

    rt-setup-database-5 --action insert --datafile ticketagent-rt.pm

(upstream RT calls it `sbin/rt-setup-database`). REST2 cannot create custom
fields, groups or rights, so this is the recipe. Everything runs in one
`@Final` action through RT's own API, and only adds what is missing, so the
file may be applied again (after adding a queue, say): it creates the queues
that do not exist, the transaction custom field (`FreeformSingle`) and
applies it to every queue named, the group, makes the user a member, and
grants the group `rt_check.QUEUE_RIGHTS` in every queue and
`ESCALATION_RIGHTS` in the escalation queue too; an escalation owner gets
OwnTicket and the group StealTicket. The user itself (and its password) is
the administrator's to create first: the file stops, naming it, when it
does not exist.
"""

import re

from ticketagent.channels.rt_check import ESCALATION_RIGHTS, QUEUE_RIGHTS

DEFAULT_GROUP = "Ticket agents"
OWNER_RIGHTS = ("OwnTicket",)  # for the escalation owner, in every queue named
STEAL_RIGHTS = ("StealTicket", "OwnTicket")  # for the group when escalate names an owner
_NAME = re.compile(r"[^\x00-\x1f'\\]{1,200}")


class SetupError(ValueError):
    """A name that cannot go into the data file; the message names it."""


def _perl(value: str, what: str) -> str:
    if not _NAME.fullmatch(value or ""):
        raise SetupError(f"{what} {value!r} cannot be used: it must be 1-200 characters without quotes, "
                         "backslashes or control characters")
    return f"'{value}'"


def _words(names) -> str:
    return "[qw(" + " ".join(names) + ")]"


def rt_datafile(*, user: str, queues: list[str], escalation_queue: str, custom_field: str = "IdempotencyKey",
                group: str = DEFAULT_GROUP, escalation_owner: str = "") -> str:
    """The data file's text (Perl, as RT's loader reads it)."""
    if not queues and not escalation_queue:
        raise SetupError("name at least one queue the agent acts in (--queue) or RT_ESCALATION_QUEUE")
    named = list(dict.fromkeys([*queues, *([escalation_queue] if escalation_queue else [])]))
    queue_list = ", ".join(_perl(q, "the queue") for q in named)
    esc = _perl(escalation_queue, "the escalation queue") if escalation_queue else "undef"
    owner = _perl(escalation_owner, "the escalation owner") if escalation_owner else "undef"
    return _TEMPLATE.format(
        user=_perl(user, "the RT user"), group=_perl(group, "the group"), cf=_perl(custom_field, "the custom field"),
        queues=queue_list, escalation=esc, owner=owner, queue_rights=_words(QUEUE_RIGHTS),
        escalation_rights=_words(ESCALATION_RIGHTS), owner_rights=_words(OWNER_RIGHTS),
        steal_rights=_words(STEAL_RIGHTS))


_TEMPLATE = """# What the ticket agent needs in Request Tracker; written by `manage.py rt-setup`.
# Apply on the RT host:  rt-setup-database-5 --action insert --datafile THIS-FILE
# Safe to apply again: it only adds what is missing. Each step prints one line "ticketagent: ...".
my %want = (
    user => {user}, group => {group}, custom_field => {cf},
    queues => [{queues}], escalation_queue => {escalation}, escalation_owner => {owner},
    queue_rights => {queue_rights}, escalation_rights => {escalation_rights},
    owner_rights => {owner_rights}, steal_rights => {steal_rights},
);

push @Final, sub {{
    my $me = RT->SystemUser;
    my $say = sub {{ print "ticketagent: ", @_, "\\n" }};
    my $grant = sub {{
        my ($principal, $who, $queue, $rights) = @_;
        for my $right (@$rights) {{
            next if $principal->HasRight(Right => $right, Object => $queue);
            my ($ok, $msg) = $principal->GrantRight(Right => $right, Object => $queue);
            die "granting $right in queue " . $queue->Name . " to $who: $msg\\n" unless $ok;
            $say->("granted $right in queue ", $queue->Name, " to $who");
        }}
    }};

    my $user = RT::User->new($me);
    $user->Load($want{{user}});
    die "the RT user $want{{user}} does not exist: create it (Privileged) first, then apply this file again\\n"
        unless $user->id;

    my @queues;
    for my $name (@{{ $want{{queues}} }}) {{
        my $queue = RT::Queue->new($me);
        $queue->Load($name);
        unless ($queue->id) {{
            my ($ok, $msg) = $queue->Create(Name => $name, Description => 'Created for the ticket agent');
            die "creating queue $name: $msg\\n" unless $ok;
            $say->("created queue $name");
        }}
        push @queues, $queue;
    }}

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

    my $owner;
    if ($want{{escalation_owner}}) {{
        $owner = RT::User->new($me);
        $owner->Load($want{{escalation_owner}});
        die "the escalation owner $want{{escalation_owner}} does not exist in RT\\n" unless $owner->id;
    }}
    for my $queue (@queues) {{
        my $escalation = $want{{escalation_queue}} && $queue->Name eq $want{{escalation_queue}};
        $grant->($group->PrincipalObj, "group $want{{group}}", $queue, $want{{queue_rights}});
        $grant->($group->PrincipalObj, "group $want{{group}}", $queue, $want{{escalation_rights}}) if $escalation;
        next unless $owner;
        $grant->($group->PrincipalObj, "group $want{{group}}", $queue, $want{{steal_rights}});
        $grant->($owner->PrincipalObj, "user $want{{escalation_owner}}", $queue, $want{{owner_rights}});
    }}
    $say->("ready: $want{{user}} (group $want{{group}}) in queue(s) ", join(', ', map {{ $_->Name }} @queues));
}};
1;
"""
