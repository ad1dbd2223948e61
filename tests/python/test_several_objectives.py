"""The helper with several objectives: an objective's tuple or list travels as one value per
objective (protocol `result`, oneshot result file), and `report` in a study with several
objectives raises as Optuna's does.

Run with:  .venv/bin/python -m unittest discover -s tests/python -v
"""

import json
import os
import shutil
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(__file__))
from test_sweepd_worker import Base, FakeSweepd, sweepd_worker  # noqa: E402

MULTI_WORKER = r'''
import sweepd_worker

def objective(trial):
    p = trial.params
    mode = p.get("mode", "tuple")
    if mode == "tuple":
        return p["x"], -p["x"], 3
    if mode == "list_inf_nan":
        return [float("inf"), float("-inf"), float("nan")]
    if mode == "nested":
        return [1.0, "fast", [2]]
    if mode == "report":
        try:
            trial.report(1.0, 0)
        except NotImplementedError as e:
            return [0.0, len(str(e))]
        return [1.0, 1.0]
    if mode == "report_uncaught":
        trial.report(1.0, 0)
    return p["x"]

if __name__ == "__main__":
    sweepd_worker.serve(objective)
'''

REFUSED = ("Trial.report is not supported for multi-objective optimization (this study has "
           "2 objectives): nothing was recorded, and such a study cannot be pruned")


class SeveralValuesTests(Base):
    def worker(self, **kw):
        return FakeSweepd(self, self.write_script(MULTI_WORKER), **kw)

    def test_a_tuple_or_list_is_an_array_of_wire_numbers(self):
        w = self.worker()
        w.expect_ready()
        _, final = w.run_trial(1, 0, {"mode": "tuple", "x": 0.5})
        self.assertEqual(final, {"type": "result", "trial_id": 1, "value": [0.5, -0.5, 3.0]})
        _, final = w.run_trial(2, 1, {"mode": "list_inf_nan"})
        self.assertEqual(final["value"], ["inf", "-inf", "nan"])
        # A sequence holding something else goes as its repr, a non-number for sweepd to fail
        # the trial as bad_value (as before there were several objectives).
        _, final = w.run_trial(3, 2, {"mode": "nested"})
        self.assertEqual(final["value"], "[1.0, 'fast', [2]]")
        # One number is still one number.
        _, final = w.run_trial(4, 3, {"mode": "one", "x": 2.0})
        self.assertEqual(final["value"], 2.0)

    def test_a_refused_report_raises_not_implemented_error(self):
        w = self.worker()
        w.expect_ready()
        w.send({"type": "trial", "trial_id": 5, "number": 0, "params": {"mode": "report"}})
        msg = w.recv()
        self.assertEqual(msg["type"], "report")
        w.send({"type": "prune", "trial_id": 5, "step": 0, "prune": False, "error": REFUSED})
        self.assertEqual(w.recv()["value"], [0.0, float(len(REFUSED))])
        # Uncaught, it fails the trial with Optuna's exception type and sweepd's words.
        w.send({"type": "trial", "trial_id": 6, "number": 1,
                "params": {"mode": "report_uncaught"}})
        self.assertEqual(w.recv()["type"], "report")
        w.send({"type": "prune", "trial_id": 6, "step": 0, "prune": False, "error": REFUSED})
        final = w.recv()
        self.assertEqual(final["type"], "error")
        self.assertEqual(final["exc_type"], "NotImplementedError")
        self.assertEqual(final["message"], REFUSED)

    def test_oneshot_writes_a_json_array(self):
        tmp = tempfile.mkdtemp(prefix="sweepd-oneshot-")
        self.addCleanup(shutil.rmtree, tmp, True)
        result_file = os.path.join(tmp, "result")
        env = {"SWEEPD_TRIAL_ID": "9", "SWEEPD_TRIAL_NUMBER": "0",
               "SWEEPD_RESULT_FILE": result_file,
               "SWEEPD_PARAMS": json.dumps({"mode": "list_inf_nan"})}
        w = FakeSweepd(self, self.write_script(MULTI_WORKER), mode="oneshot", env=env)
        w.expect_ready()
        self.assertEqual(w.recv()["value"], ["inf", "-inf", "nan"])
        self.assertEqual(w.wait(), 0)
        with open(result_file) as f:
            self.assertEqual(json.loads(f.read()), ["inf", "-inf", "nan"])


class EncodingTests(unittest.TestCase):
    def test_sequences_but_not_strings(self):
        enc = sweepd_worker._encode_result_value
        self.assertEqual(enc((1, 2.5)), [1.0, 2.5])
        self.assertEqual(enc((1, True)), "(1, True)")
        self.assertEqual(enc([]), [])
        self.assertEqual(enc("1.5"), 1.5)
        self.assertEqual(enc(b"x"), "b'x'")
        self.assertEqual(enc({"a": 1}), "{'a': 1}")
        self.assertEqual(sweepd_worker._result_file_text([1, float("nan")]), '[1.0, "nan"]')
        self.assertEqual(sweepd_worker._result_file_text(2), "2.0")


if __name__ == "__main__":
    unittest.main()
