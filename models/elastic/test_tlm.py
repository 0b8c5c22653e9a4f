#!/usr/bin/python3
"""Unit tests of tlm.py's labelling and decision rules (the Go side,
engine/elastic/slo, implements the same rules; the cases below are the
ones its tests use): /usr/bin/python3 models/elastic/test_tlm.py"""

import os
import random
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402

import tlm  # noqa: E402


class Rules(unittest.TestCase):
    def test_compress_matches_go_cases(self):
        ids = [100, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10]
        scores = [0, 5, 1, 9, 2, 8, 3, 7, 4, 6, 0]
        for tail, pct, want in ((0, 100, ids), (0, 0, [100]), (0, 50, [100, 1, 3, 5, 7, 9]),
                                (2, 50, [100, 1, 3, 5, 7, 9, 10]), (2, 20, [100, 3, 5, 9, 10])):
            got = tlm.compress(ids, tail, scores, pct)
            self.assertEqual(got, want, (tail, pct))
            self.assertEqual(len(got), tlm.kept_len(len(ids), tail, pct))

    def test_retention_is_top_half(self):
        si = [99.0, 1, 5, 2, 6, 3, 0.5]
        lab = tlm.retention_labels(si, 1)
        # first token and the tail kept; of the 5 between, the top 2 (floor half).
        self.assertEqual(lab, [1, 0, 1, 0, 1, 0, 1])

    def test_slo_tokens(self):
        cfg = tlm.TLMConfig(40)
        self.assertEqual(tlm.slo_token(cfg, 0.4, 0.7), [cfg.cls, cfg.ttft0 + 4, cfg.tpot0 + 7])
        self.assertEqual(tlm.slo_token(cfg, 0.25, 3), [cfg.cls, cfg.ttft0 + 3, cfg.tpot0 + 10])

    def test_decision_label_is_lightest_correct_feasible(self):
        prof = tlm.Profile.__new__(tlm.Profile)
        prof.lengths = [10, 100]
        prof.ttft = {m: [10 * m / 100, 100 * m / 100] for m in (20, 60, 100)}
        prof.tpot = {m: m / 10 for m in (20, 60, 100)}
        prof.tlm_lengths, prof.tlm_ms, prof.switch_ms = [], [], 0.0
        tlm.GRID = [20, 60, 100]
        it = {"ids": list(range(101)), "tail": 0,
              "correct": {f"{m},{p}": int(m == 60 and p >= 60) for m in tlm.GRID for p in tlm.GRID}}
        m, p, kind = tlm.decision_label(prof, it, 1.0, 1.0, random.Random(1))
        self.assertEqual((m, p, kind), (60, 60, "correct"))
        m, p, kind = tlm.decision_label(prof, it, 1.0, 0.5, random.Random(1))  # 60 is too slow per token
        self.assertEqual(kind, "default")
        self.assertEqual(m, 20)
        self.assertEqual(tlm.decision_label(prof, it, 1.0, 0.1, random.Random(1))[2], "infeasible")

    def test_tlm_shapes(self):
        cfg = tlm.TLMConfig(40)
        cfg.dim, cfg.ffn, cfg.max_positions = 16, 32, 20
        model = tlm.TLM(cfg).eval()
        x = torch.tensor([tlm.tlm_input(cfg, list(range(30)), 0.5, 0.5)])
        self.assertEqual(x.shape[1], 20)  # cut to max_positions from the front
        s, m, p = model(x)
        self.assertEqual(tuple(s.shape), (1, 20))
        self.assertEqual(tuple(m.shape), (1, len(tlm.GRID)))
        self.assertEqual(tuple(p.shape), (1, len(tlm.GRID)))


if __name__ == "__main__":
    unittest.main()
