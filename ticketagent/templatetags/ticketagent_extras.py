"""Template filters for the pages: look-ups in dicts, step names, words from identifiers."""

from django import template

from ticketagent.plan import step_name as _step_name

register = template.Library()


@register.filter
def get_item(mapping, key):
    """A list from a dict of lists (effects by item); [] when missing."""
    return (mapping or {}).get(key, [])


@register.filter
def step_name(cursor):
    """The step a checkpoint cursor points at."""
    return _step_name(cursor)


@register.filter
def duration(seconds):
    """A short human duration: 45 s, 3 min 20 s, 2 h 5 min."""
    try:
        seconds = int(float(seconds))
    except (TypeError, ValueError):
        return ""
    if seconds < 60:
        return f"{seconds} s"
    minutes, seconds = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes} min {seconds} s" if seconds else f"{minutes} min"
    hours, minutes = divmod(minutes, 60)
    if hours < 48:
        return f"{hours} h {minutes} min" if minutes else f"{hours} h"
    days, hours = divmod(hours, 24)
    return f"{days} d {hours} h" if hours else f"{days} d"


@register.filter
def words(value):
    """needs_confirmation -> needs confirmation."""
    return str(value).replace("_", " ")
