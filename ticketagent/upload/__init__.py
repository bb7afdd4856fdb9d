"""Parse an uploaded batch of support tickets (CSV or JSON Lines).

Pure Python: no Django models, no settings. The only Django import is
``EmailValidator`` (which works without configured settings). The format is
documented in ``docs/upload-format.md``. Import each name from the module
that defines it:

* ``parse``: :func:`parse_batch`, the entry point (format detection,
  decoding, size limits); it never raises, and returns all rows or none;
* ``rows``: the columns and limits, :class:`TicketRow`, :class:`RowError`,
  :class:`ParseResult`, the error collector and the shared text/JSON helpers;
* ``validate``: the row validator both formats share;
* ``csv_format`` and ``jsonl_format``: the two readers.
"""
