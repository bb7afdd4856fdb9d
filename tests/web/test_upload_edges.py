"""Files an operator may really pick: a spreadsheet named .csv, a file with a very long name, a file over the
size limit. Each gets a clear message, the same on the page and from `manage.py upload`.

Before: a renamed .xlsx was "file contains many NUL bytes and looks like UTF-16 text"; a 1,000-character
file name got Django's bare "Bad Request (400)"; one 10,485,760-byte limit was "10.0 MB" from the command
and "10.5 MB" on the page, and a 14 MB file "13.8 MB; the limit is 10.0 MB" vs "14.4 MB; the limit is 12.6 MB".
"""

from __future__ import annotations

import io
import re

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.core.management import CommandError, call_command
from django.urls import reverse

from ticketagent.models import Task

from ..factories import csv_batch
from ..upload.test_parser import XLS, XLSX

pytestmark = pytest.mark.django_db

HTMX = {"HX-Request": "true"}


def post_file(client, data: bytes, name: str, **headers):
    return client.post(reverse("upload"), {"file": SimpleUploadedFile(name, data), "notify_channel": "helpdesk",
                                           "failure_threshold": 3}, headers=headers)


def command_errors(tmp_path, data: bytes, name: str) -> list[str]:
    path = tmp_path / name
    path.write_bytes(data)
    err = io.StringIO()
    with pytest.raises(CommandError):
        call_command("upload", str(path), stdout=io.StringIO(), stderr=err)
    return [line.split(": ", 1)[1] for line in err.getvalue().splitlines()]


@pytest.mark.parametrize("data, kind", [(XLSX, ".xlsx"), (XLS, ".xls")])
def test_a_spreadsheet_named_csv_says_export_it_as_csv_on_the_page_and_in_the_command(client, alice, tmp_path,
                                                                                         data, kind):
    client.force_login(alice)
    response = post_file(client, data, "tickets.csv")
    assert response.status_code == 400
    [error] = response.context["errors"]
    assert error.startswith(f"file: this is an Excel file ({kind}), not CSV text; export it as CSV"), error
    assert "NUL" not in error and "UTF-16" not in error
    assert command_errors(tmp_path, data, "tickets.csv") == [error]
    assert Task.objects.count() == 0


def post_raw(client, data: bytes, filename: str, **headers):
    """A multipart upload as a browser sends it: the file name exactly as given (Django's test client,
    like Django's own parser, would cut it to 255 characters first)."""
    boundary = "----ticketagent-test-boundary"
    fields = b"".join(f'--{boundary}\r\nContent-Disposition: form-data; name="{k}"\r\n\r\n{v}\r\n'.encode()
                      for k, v in (("notify_channel", "helpdesk"), ("failure_threshold", "3")))
    part = (f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="{filename}"\r\n'
            f"Content-Type: text/csv\r\n\r\n").encode() + data + f"\r\n--{boundary}--\r\n".encode()
    return client.generic("POST", reverse("upload"), fields + part,
                          content_type=f"multipart/form-data; boundary={boundary}", headers=headers)


@pytest.mark.parametrize("headers", [{}, HTMX], ids=["page", "htmx"])
@pytest.mark.parametrize("length", [1000, 300])
def test_an_over_long_file_name_gets_a_clear_message(client, alice, headers, length):
    client.force_login(alice)
    client.raise_request_exception = False
    response = post_raw(client, csv_batch(2), "t" * (length - 4) + ".csv", **headers)
    assert response.status_code == 400
    text = response.content.decode()
    assert (f"file name is {length:,} characters long; the limit is 255 - rename the file and upload it "
            "again. Nothing was uploaded.") in text
    if headers:  # htmx: into the page's alert box, not over the form
        assert response["HX-Retarget"] == "#flash" and text.startswith('<div id="flash"')
    assert Task.objects.count() == 0


def test_a_255_character_file_name_is_fine(client, alice):
    client.force_login(alice)
    assert post_raw(client, csv_batch(2), "t" * 251 + ".csv").status_code == 302
    assert Task.objects.get().source_filename == "t" * 251 + ".csv"


def _sizes(text: str) -> list[str]:
    return re.findall(r"\d+\.\d MB", text)


def test_one_limit_one_figure_on_the_page_and_in_the_command(client, alice, tmp_path):
    """A 14,500,000-byte file (over the request cap: refused before it is read) and an 11 MB one (refused by
    the parser): the page and the command show the same figures, for the file and for the limit."""
    client.force_login(alice)
    big = csv_batch(1) + b"x" * (14_500_000 - len(csv_batch(1)))
    page = post_file(client, big, "big.csv").content.decode()
    cli = command_errors(tmp_path, big, "big.csv")
    assert cli == ["file: file is 13.8 MB; the limit is 10.0 MB"]
    assert _sizes(page) == ["13.8 MB", "10.0 MB"], page
    assert "the limit for an uploaded file is 10.0 MB" in page

    medium = csv_batch(1) + b"x" * (11 * 1024 * 1024)
    response = post_file(client, medium, "medium.csv")
    assert response.status_code == 400
    assert response.context["errors"] == command_errors(tmp_path, medium, "medium.csv") == [
        "file: file is 11.0 MB; the limit is 10.0 MB"]


def test_other_oversized_requests_name_the_request_limit_in_the_same_units(client, alice):
    client.force_login(alice)
    client.raise_request_exception = False
    response = client.post(reverse("task-pause", args=[1]), {"reason": "x" * 13_000_000})
    assert response.status_code == 413
    assert _sizes(response.content.decode()) == ["12.4 MB", "12.0 MB"]
