"""The report page's "What the run did" section (raylc/io/page.py)."""

from __future__ import annotations

from raylc.io.page import run_facts


def test_run_facts_show_each_stage_and_the_report_stage_as_writing_the_page():
    manifest = {"stages": {"infer": {"status": "done", "seconds": 12.5,
                                     "rows": {"requests": 1200, "errors": 3, "truncated_tokens": 4096}},
                           "score": {"status": "failed", "seconds": 0.1},
                           "report": {"status": "running", "seconds": 0}}}
    page = "".join(run_facts(manifest))
    assert "requests=1,200, errors=3, truncated_tokens=4,096" in page
    assert "failed" in page and "writing this page" in page and ">running<" not in page
    assert "4,096 prompt tokens were cut" in page and "3 requests failed" in page
