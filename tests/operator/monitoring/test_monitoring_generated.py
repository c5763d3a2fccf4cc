"""The dashboards and alert rules in the chart, and the metrics table of docs/monitoring.md, are generated from
monitoring/ and server/metric_names.py; a stale or hand-edited copy fails here (as the CRDs do in
tests/operator/api/test_crds.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from rlplace_operator.monitoring import __main__ as generator
from rlplace_operator.server import metric_names


def test_generated_files_are_current() -> None:
    for path, text in generator.generated_files().items():
        file = generator.CHART / path
        assert file.is_file(), f"{file} is missing: run `make monitoring`"
        assert file.read_text() == text, f"{file} is stale: run `make monitoring`"
    assert generator.stale_files() == [], "run `make monitoring` (the dashboards, rules or docs/monitoring.md table)"


def test_check_mode_reports_stale_missing_and_orphan_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    docs = tmp_path / "monitoring.md"
    docs.write_text(generator.DOCS.read_text())
    chart = tmp_path / "chart"
    assert generator.main([], chart=chart, docs=docs) == 0
    assert generator.main(["--check"], chart=chart, docs=docs) == 0
    edited = chart / "dashboards" / "job.json"
    edited.write_text(edited.read_text().replace('"rlplace / Job"', '"my job"', 1))
    (chart / generator.RULES_FILE).unlink()
    orphan = chart / "dashboards" / "old.json"
    docs.write_text(docs.read_text().replace("| `rlplace_jobs` |", "| `rlplace_job_count` |"))
    orphan.write_text("{}")
    capsys.readouterr()
    assert generator.main(["--check"], chart=chart, docs=docs) == 1
    reported = capsys.readouterr().err
    for stale in (edited, chart / generator.RULES_FILE, orphan, docs):
        assert str(stale) in reported
    assert "fleet.json" not in reported
    assert generator.main([], chart=chart, docs=docs) == 0
    assert not orphan.exists() and generator.main(["--check"], chart=chart, docs=docs) == 0
    assert docs.read_text() == generator.DOCS.read_text()


def test_docs_table_lists_every_metric_with_its_labels() -> None:
    text = generator.DOCS.read_text()
    for metric in metric_names.ALL:
        assert f"| `{metric.name}` | {', '.join(metric.labels)} |" in text, metric.name
