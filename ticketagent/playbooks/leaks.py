"""Secrets in a reply: keys and tokens, passwords, one-time codes, and what was written for the team only.

What matched is reported masked (its first four characters and "…"): a
held reply's reasons are shown on pages and kept in events, and a secret is
not put back there in full.
"""

import re

# The shapes of keys and tokens, each named: a match is a secret whatever the text around it says.
_SHAPES = (
    ("an API key", r"\bsk-(?:proj-|live-|test-|ant-)?[A-Za-z0-9_-]{16,}"),
    ("an AWS key", r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"),
    ("a GitHub token", r"\bgh[pousr]_[A-Za-z0-9]{20,}\b|\bgithub_pat_[A-Za-z0-9_]{20,}"),
    ("a Slack token", r"\bxox[abposr]-[A-Za-z0-9-]{10,}"),
    ("a Stripe key", r"\b(?:rk|pk|sk|whsec)_(?:live|test)_[A-Za-z0-9]{10,}"),
    ("a Google API key", r"\bAIza[0-9A-Za-z_-]{30,}"),
    ("a JSON web token", r"\beyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}"),
    ("a private key", r"-----BEGIN [A-Z ]*PRIVATE KEY-----"),
    ("a long hex token", r"(?<![\w/.-])[0-9a-fA-F]{32,}(?![\w/-]|\.\w)"),
)
_SHAPE = [(name, re.compile(pattern)) for name, pattern in _SHAPES]
# A long run of letters and digits mixing upper case, lower case and digits: base64 or random tokens.
_TOKEN = re.compile(r"(?<![\w/.@-])[A-Za-z0-9+/_-]{28,}={0,2}(?![\w/@-]|\.\w)")
_PASSWORD_WORDS = (r"passwor[dt]|passcode|pass\s?phrase|pwd|mot\s+de\s+passe|contraseña|clave|wachtwoord|"
                   r"kennwort|senha|password\s+temporanea|密码|口令|パスワード|비밀번호")
_PASSWORD = re.compile(
    rf"(?i:{_PASSWORD_WORDS})\s*(?:[:=]|\s(?i:is|was|ist|war|est|était|es|era|is|was|é|wordt|lautet|reads|would be)"
    r"\s*:?|：)\s*[\"'“„«]?(?P<value>[^\s\"'”“«»]{4,})")
_CODE_WORDS = (r"verification\s+code|one[-\s]time\s+(?:code|password|passcode|pin)|security\s+code|login\s+code|"
               r"2fa\s+code|two[-\s]factor\s+code|auth(?:entication)?\s+code|otp|pin(?:\s+code)?|code|"
               r"bestätigungscode|sicherheitscode|einmalcode|code\s+de\s+(?:vérification|sécurité|confirmation)|"
               r"código\s+de\s+(?:verificación|seguridad|confirmación)|verificatiecode|beveiligingscode|"
               r"验证码|認証コード|인증번호")
_ONE_TIME_CODE = re.compile(
    rf"(?i:{_CODE_WORDS})\b\s*(?:[:：=#]|\s(?i:is|was|ist|war|lautet|est|était|es|era|would\s+be|reads)\s*:?)?\s*"
    r"[\"'“„«]?(?P<value>\d{3}[\s-]?\d{3}|\d{4,8})(?!\d)")


def mask(value: str) -> str:
    """A secret as it may be shown: its first four characters, then "…" (its length is not told)."""
    return value[:4] + "…" if len(value) > 4 else "…"


def _sentences(text: str, *, shortest: int) -> list[str]:
    return [" ".join(s.split()) for s in re.split(r"(?<=[.!?。！？])\s+|\n+", text or "")
            if len(" ".join(s.split())) >= shortest]


def secrets_found(text: str, *, internal: list[str], guidance: list[str], public: list[str] = ()) -> list[str]:
    """The secrets in `text`, each "what (masked)": key and token shapes, a password or a one-time code
    given, and a sentence written for the team only said word for word: of `internal` (a ticket's notes),
    of `guidance` (the playbook's), unless `public` (its articles) says it too."""
    found = []
    for name, pattern in _SHAPE:
        found += [f"{name} {mask(m.group(0))}" for m in pattern.finditer(text)]
    for match in _TOKEN.finditer(text):
        value = match.group(0)
        mixed = re.search(r"[a-z]", value) and re.search(r"[A-Z]", value) and re.search(r"\d", value)
        if mixed and not any(mask(value) in f for f in found):
            found.append(f"a token {mask(value)}")
    for match in _PASSWORD.finditer(text):
        value = match.group("value").rstrip(".,;:!?)")
        if re.search(r"[\d\W_]", value):  # "password is required" is a sentence, "password: Trail#22" is one
            found.append(f"a password {mask(value)}")
    found += [f"a one-time code {mask(m.group('value'))}" for m in _ONE_TIME_CODE.finditer(text)]
    flat = " ".join(text.split()).casefold()
    for note in _sentences("\n".join(internal), shortest=16):
        if note.casefold() in flat:
            found.append(f"an internal note “{note[:12]}…”")
    said = " ".join(" ".join(p.split()) for p in public).casefold()
    lines = [" ".join(line.split()) for line in "\n".join(guidance).splitlines() if len(line.strip()) >= 40]
    for line in dict.fromkeys(_sentences("\n".join(guidance), shortest=30) + lines):
        if line.casefold() in flat and line.casefold() not in said:
            found.append(f"the playbook's guidance “{line[:30]}…”")
    return list(dict.fromkeys(found))
