"""The docs cannot drift from the code: every setting (`lakewarden.settings.Settings`) and
every policy field (each section of `lakewarden.policy.model.Policy`) has a row in
docs/configuration.md, and every relative link in README.md and docs/*.md reaches an
existing file and, when it names one, an existing heading. Markdown is read as text; nothing
is rendered."""

from __future__ import annotations

import re
from pathlib import Path

from pydantic import BaseModel

from lakewarden.policy.model import Policy
from lakewarden.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
CONFIGURATION = ROOT / "docs" / "configuration.md"
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

FENCE = re.compile(r"^```.*?^```", re.M | re.S)
# A Markdown link or image: [text](target) or ![alt](target); the target has no spaces.
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
# A cell boundary: a pipe not escaped as `\|` (which a cell may hold: `ready=true\|false`).
CELL = re.compile(r"(?<!\\)\|")


def prose(text: str) -> str:
    """The text without its fenced code blocks (a `# comment` there is no heading)."""
    return FENCE.sub("", text)


def tables(text: str) -> list[tuple[list[str], list[list[str]]]]:
    """Each Markdown table as (header cells, body rows of cells)."""
    found: list[tuple[list[str], list[list[str]]]] = []
    block: list[list[str]] = []
    for line in [*prose(text).splitlines(), ""]:
        if line.startswith("|"):
            block.append([c.strip() for c in CELL.split(line.strip().strip("|"))])
            continue
        if len(block) >= 2 and set("".join(block[1])) <= set("-: "):
            found.append((block[0], block[2:]))
        block = []
    return found


def names(cell: str) -> set[str]:
    """The names a cell gives in backticks: `A` / `B` rows name several."""
    return set(re.findall(r"`([^`]+)`", cell))


def documented_settings(text: str) -> set[str]:
    """Setting names in the first cell of a table row, without the `LAKEWARDEN_` prefix."""
    return {
        n.removeprefix("LAKEWARDEN_")
        for _, rows in tables(text)
        for row in rows
        for n in names(row[0])
    }


def documented_policy(text: str) -> set[tuple[str, str]]:
    """(section, field) for each row of a table whose header names the section as
    `section.` (a header may name several: the fields every kind's section has)."""
    found: set[tuple[str, str]] = set()
    for header, rows in tables(text):
        sections = re.findall(r"`(\w+)\.`", header[0])
        for row in rows:
            found |= {(s, f) for s in sections for f in names(row[0])}
    return found


def policy_fields() -> set[tuple[str, str]]:
    fields: set[tuple[str, str]] = set()
    for section, info in Policy.model_fields.items():
        model = info.annotation
        assert isinstance(model, type) and issubclass(model, BaseModel), section
        fields |= {(section, f) for f in model.model_fields}
    return fields


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, backticks and punctuation dropped,
    spaces to hyphens."""
    text = heading.strip().lower().replace("`", "")
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    seen: dict[str, int] = {}
    out: set[str] = set()
    for m in re.finditer(r"^#{1,6} (.+)$", prose(page.read_text()), re.M):
        s = slug(m.group(1))
        n = seen.get(s, 0)
        seen[s] = n + 1
        out.add(s if n == 0 else f"{s}-{n}")
    return out


def broken_links(page: Path) -> list[str]:
    broken = []
    for target in LINK.findall(prose(page.read_text())):
        if re.match(r"[a-z]+:", target):
            continue  # https:, mailto:: not ours to check
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if not file.exists():
            broken.append(f"{target}: no file {file.relative_to(ROOT)}")
        elif anchor and (file.suffix != ".md" or anchor not in anchors(file)):
            broken.append(f"{target}: no heading #{anchor} in {file.relative_to(ROOT)}")
    return broken


def test_every_setting_is_documented() -> None:
    documented = documented_settings(CONFIGURATION.read_text())
    missing = sorted(n.upper() for n in Settings.model_fields if n.upper() not in documented)
    assert not missing, f"settings without a row in docs/configuration.md: {missing}"


def test_every_policy_field_is_documented() -> None:
    documented = documented_policy(CONFIGURATION.read_text())
    missing = sorted(f"{s}.{f}" for s, f in policy_fields() - documented)
    assert not missing, (
        f"policy fields without a row in docs/configuration.md (a table headed `section.`): "
        f"{missing}"
    )


def test_a_removed_row_is_missed() -> None:
    """The checks read what they should: without its row, a setting or field is missing."""
    text = CONFIGURATION.read_text()
    lines = text.splitlines()
    without_setting = "\n".join(ln for ln in lines if not ln.startswith("| `LOG_FORMAT`"))
    assert "LOG_FORMAT" in documented_settings(text)
    assert "LOG_FORMAT" not in documented_settings(without_setting)
    without_field = "\n".join(ln for ln in lines if not ln.startswith("| `max_rows`"))
    assert ("validation", "max_rows") in documented_policy(text)
    assert ("validation", "max_rows") not in documented_policy(without_field)


def test_every_relative_link_resolves() -> None:
    broken = {str(p.relative_to(ROOT)): b for p in PAGES if (b := broken_links(p))}
    assert not broken, broken


def test_slugs_are_githubs() -> None:
    assert slug("Two execution modes, per pool") == "two-execution-modes-per-pool"
    assert slug("Primary-key (upsert) tables") == "primary-key-upsert-tables"
    assert slug("Architecture: what lives where") == "architecture-what-lives-where"
