"""The bench scripts' shared module (bench/benchlib.py): `write_section` replaces one section of
docs/benchmarks.md and leaves every other byte of the file as it was."""

import os
import sys
import tempfile
import unittest
from pathlib import Path

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "bench"))
import benchlib  # noqa: E402

DOC = """# Benchmarks

Intro kept as written.

<!-- bench:first -->
## First
old first body
<!-- /bench:first -->

Hand-written text between the sections.

<!-- bench:second -->
## Second
old second body
<!-- /bench:second -->
trailing text, no newline at the end"""


class WriteSection(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.doc = Path(self.dir.name) / "docs" / "benchmarks.md"

    def tearDown(self):
        self.dir.cleanup()

    def write(self, marker, body):
        benchlib.write_section(marker, body, doc=self.doc)
        return self.doc.read_text()

    def test_the_text_between_the_markers_is_replaced_and_nothing_else(self):
        self.doc.parent.mkdir()
        self.doc.write_text(DOC)
        got = self.write("first", "\n## First\nnew body\n\n")
        self.assertEqual(got, DOC.replace("## First\nold first body", "## First\nnew body"))

    def test_the_last_section_keeps_the_text_after_its_end_marker(self):
        self.doc.parent.mkdir()
        self.doc.write_text(DOC)
        got = self.write("second", "## Second\nnew")
        self.assertEqual(got, DOC.replace("## Second\nold second body", "## Second\nnew"))

    def test_a_section_not_in_the_doc_is_appended_after_the_rest(self):
        self.doc.parent.mkdir()
        self.doc.write_text(DOC)
        got = self.write("third", "## Third")
        self.assertEqual(got, DOC + "\n\n<!-- bench:third -->\n## Third\n<!-- /bench:third -->\n")

    def test_a_missing_doc_starts_from_the_header(self):
        got = self.write("first", "## First")
        self.assertEqual(got, benchlib.DOC_INTRO + "\n<!-- bench:first -->\n## First\n"
                         "<!-- /bench:first -->\n")

    def test_a_marker_that_is_a_prefix_of_another_replaces_only_its_own_section(self):
        self.doc.parent.mkdir()
        self.doc.write_text("<!-- bench:firstx -->\nx\n<!-- /bench:firstx -->\n\n"
                            "<!-- bench:first -->\nold\n<!-- /bench:first -->\n")
        got = self.write("first", "new")
        self.assertEqual(got, "<!-- bench:firstx -->\nx\n<!-- /bench:firstx -->\n\n"
                              "<!-- bench:first -->\nnew\n<!-- /bench:first -->\n")

    def test_no_temporary_file_is_left_beside_the_doc(self):
        self.write("first", "## First")
        self.assertEqual(os.listdir(self.doc.parent), ["benchmarks.md"])


class DocIntro(unittest.TestCase):
    def test_the_header_is_the_one_docs_benchmarks_md_starts_with(self):
        doc = Path(__file__).resolve().parents[2] / "docs" / "benchmarks.md"
        self.assertTrue(doc.read_text().startswith(benchlib.DOC_INTRO + "\n<!-- bench:"))


if __name__ == "__main__":
    unittest.main()


def row(kind=None, seconds=1.0, reason=None):
    return {"fail_kind": kind, "duration_s": seconds, "fail_reason": reason}


class CapsFigures(unittest.TestCase):
    """Issue 41's columns of the packing bench, from `sweepd trials --json` rows."""

    def test_seconds_lost_are_the_capped_attempts_of_all_trial_seconds(self):
        rows = [row(seconds=3.0), row("cap", 0.5), row("cap", 0.25), row("oom", 1.0),
                row(seconds=None), row("timeout", 2.0)]
        self.assertEqual(benchlib.seconds_lost_to_caps(rows), (0.75, 6.75))

    def test_a_run_with_no_trial_loses_nothing(self):
        self.assertEqual(benchlib.seconds_lost_to_caps([]), (0.0, 0.0))

    def test_collateral_ooms_are_those_within_what_they_were_admitted_with(self):
        within = ("CUDA out of memory. Tried to allocate 1.00 GiB (with that allocation its "
                  "process would have held 3.0 GiB, within the 6.9 GiB it was admitted with: "
                  "other processes held the rest of the card; on a card shared with other jobs, "
                  "raise [gpu] headroom)")
        own = "CUDA out of memory. Tried to allocate 9.00 GiB"
        rows = [row("oom", reason=within), row("oom", reason=own), row("cap", reason=within),
                row("oom")]
        self.assertEqual(benchlib.collateral_ooms(rows), [rows[0]])
