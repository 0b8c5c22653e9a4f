#!/usr/bin/python3
"""Unit tests of the offline step: /usr/bin/python3 models/elastic/test_elastic.py"""

import json
import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import numpy as np  # noqa: E402
import torch  # noqa: E402

import elastic  # noqa: E402
import llama  # noqa: E402


class LevelPlan(unittest.TestCase):
    def test_clamps_and_rounding(self):
        cfg = llama.Config(vocab=100, dim=256, n_layers=6, n_heads=8, n_kv_heads=4, ffn=768)
        levels = elastic.plan_levels(cfg, [0], 32)
        self.assertEqual([lv["level"] for lv in levels], elastic.LEVELS)
        prev = 0
        for lv in levels:
            for l, w in enumerate(lv["layers"]):
                if l == 0 or lv["level"] == 100:
                    self.assertEqual((w["q_heads"], w["kv_heads"], w["ffn"]), (8, 4, 768))
                    continue
                self.assertGreaterEqual(w["kv_heads"], 1)
                self.assertEqual(w["q_heads"], 2 * w["kv_heads"])
                self.assertGreaterEqual(w["ffn"], 32)
                self.assertEqual(w["ffn"] % 32, 0)
            self.assertGreaterEqual(lv["param_fraction_layers"], prev)
            prev = lv["param_fraction_layers"]
        # 20%: r_na = (0.2*6 - 1)/5 = 0.04, clamped to one KV group and G neurons.
        self.assertAlmostEqual(levels[0]["r_non_anchor"], 0.04)
        self.assertEqual(levels[0]["layers"][1]["ffn"], 32)
        self.assertEqual(levels[0]["layers"][1]["kv_heads"], 1)
        # The realized fraction is reported, and it is above the nominal 20%.
        self.assertGreater(levels[0]["param_fraction_layers"], 0.2)


class Orders(unittest.TestCase):
    def test_gqa_order_groups_then_members(self):
        q = torch.tensor([0.1, 0.2, 5.0, -4.0, 0.0, 0.3, 1.0, -9.0], dtype=torch.float64)
        kv = torch.tensor([0.0, 0.0, 0.0, 0.0], dtype=torch.float64)
        qo, kvo = elastic.gqa_order(q, kv, 4)
        # group sums |0.3|, |1.0|, |0.3|, |-8| -> groups 3, 1, then 0 and 2 (stable)
        self.assertEqual(kvo[:2], [3, 1])
        self.assertEqual(qo[:2], [7, 6])  # |-9| before |1|
        elastic.check_gqa_consistent(qo, kvo, 2)
        self.assertEqual(sorted(qo), list(range(8)))
        rng = np.random.RandomState(0)
        qr, kvr = elastic.gqa_order(q, kv, 4, rng, "random")
        elastic.check_gqa_consistent(qr, kvr, 2)
        self.assertEqual(elastic.gqa_order(q, kv, 4, order="none"), (list(range(8)), list(range(4))))

    def test_permutation_is_exact_in_fp64(self):
        torch.manual_seed(0)
        cfg = llama.Config(vocab=64, dim=32, n_layers=2, n_heads=4, n_kv_heads=2, ffn=48)
        model = llama.Llama(cfg).double().eval()
        ids = torch.randint(0, 64, (1, 9))
        with torch.no_grad():
            ref = elastic.llama_logits(model, ids)
        rng = np.random.RandomState(3)
        qo, kvo, fo = [], [], []
        for _ in range(cfg.n_layers):
            q, kv = elastic.gqa_order(torch.zeros(4), torch.zeros(2), 2, rng, "random")
            qo.append(q)
            kvo.append(kv)
            fo.append([int(i) for i in rng.permutation(48)])
        elastic.permute_llama(model, qo, kvo, fo)
        with torch.no_grad():
            got = elastic.llama_logits(model, ids)
        self.assertLess((got - ref).abs().max().item(), 1e-12)
        # A head order that splits a group is not equivalent: the check catches it.
        with self.assertRaises(AssertionError):
            elastic.check_gqa_consistent([0, 2, 1, 3], [0, 1], 2)


class ImportanceFile(unittest.TestCase):
    """--importance-from: the scores of `tl elastic importance` give the
    order (KV groups by their heads' sum), and bad files are refused."""

    cfg = llama.Config(vocab=64, dim=32, n_layers=1, n_heads=4, n_kv_heads=2, ffn=6)

    def write(self, **over):
        d = {"format": elastic.IMPORTANCE_FORMAT, "method": "proxy", "n_layers": 1, "n_heads": 4, "n_kv_heads": 2,
             "head_dim": 8, "ffn": 6, "tokens": 10,
             "layers": [{"q_heads": [0.1, 0.2, 0.25, 0.0], "kv_groups": [0.3, 0.25],
                         "neurons": [0.5, 0.0, 3.0, 1.0, 0.2, 0.9]}]}
        d.update(over)
        f = tempfile.NamedTemporaryFile("w", suffix=".json", delete=False)
        json.dump(d, f)
        f.close()
        self.addCleanup(os.remove, f.name)
        return f.name

    def test_order(self):
        imps, meta = elastic.load_importance(self.write(), self.cfg)
        self.assertEqual(meta["method"], "proxy")
        self.assertNotIn("layer_removal_loss_increase", meta)
        _, meta = elastic.load_importance(self.write(layer_removal_loss_increase=[0.5]), self.cfg)
        self.assertEqual(meta["layer_removal_loss_increase"], [0.5])
        q, kv = elastic.gqa_order(imps[0]["q_signed"], imps[0]["kv_signed"], 2)
        # group 0 sums 0.3 > group 1's 0.25; within group 1, head 2 before 3
        self.assertEqual(kv, [0, 1])
        self.assertEqual(q, [1, 0, 2, 3])
        self.assertEqual(elastic.unit_order(imps[0]["neuron"]), [2, 3, 5, 0, 4, 1])
        # A file's own group scores (Taylor's include the K/V term) decide
        # the group order, heads still by their own scores within a group.
        layer = {"q_heads": [0.1, 0.2, 0.25, 0.0], "kv_groups": [0.1, 0.9], "neurons": [1.0] * 6}
        imps, _ = elastic.load_importance(self.write(layers=[layer]), self.cfg)
        q, kv = elastic.gqa_order(imps[0]["q_signed"], imps[0]["kv_signed"], 2)
        self.assertEqual((q, kv), ([2, 3, 1, 0], [1, 0]))

    def test_refused(self):
        bad_layer = [{"q_heads": [0.1, -0.2, 0.0, 0.0], "kv_groups": [0, 0], "neurons": [0] * 6}]
        for over, want in [({"format": "x"}, "format"), ({"ffn": 8}, "ffn"), ({"layers": []}, "layers of scores"),
                           ({"layers": [{"q_heads": [1], "neurons": [1] * 6}]}, "head and"),
                           ({"layers": bad_layer}, "negative"),
                           ({"layer_removal_loss_increase": [1.0, 2.0]}, "layer_removal")]:
            with self.assertRaises(SystemExit) as e:
                elastic.load_importance(self.write(**over), self.cfg)
            self.assertIn(want, str(e.exception))


class CompareImportance(unittest.TestCase):
    """compare_importance.py's figures: identical files agree exactly, a
    scaled score shows as its relative difference, a swap as another order."""

    def test_compare(self):
        import compare_importance as ci
        layer = {"q_heads": [0.1, 0.2, 0.25, 0.0], "kv_groups": [0.3, 0.25], "neurons": [0.5, 0.0, 3.0, 1.0]}
        a = {"n_layers": 1, "n_heads": 4, "n_kv_heads": 2, "ffn": 4, "layers": [layer]}
        row = ci.compare(a, a)[0]["neurons"]
        self.assertEqual((row["same_order"], row["max_rel_diff"], row["spearman"]), (True, 0.0, 1.0))
        b = json.loads(json.dumps(a))
        b["layers"][0]["neurons"][3] = 1.001
        row = ci.compare(b, a)[0]["neurons"]
        self.assertTrue(row["same_order"])
        self.assertAlmostEqual(row["max_rel_diff"], 1e-3, places=9)
        b["layers"][0]["neurons"][0] = 2.0
        self.assertFalse(ci.compare(b, a)[0]["neurons"]["same_order"])
        b["layers"][0]["neurons"][1] = 0.5
        self.assertEqual(ci.compare(b, a)[0]["neurons"]["max_rel_diff"], float("inf"))


class CalibrationWindows(unittest.TestCase):
    """calibration_windows draws its rows from the named streams in turn;
    the default is the three text streams; missing or short streams are
    refused by name."""

    def test_sources(self):
        with tempfile.TemporaryDirectory() as d:
            for name, base in (("fortunes", 0), ("pydoc", 1000), ("debref", 2000), ("recall_dense", 5000)):
                np.save(os.path.join(d, f"{name}_train.npy"), (base + np.arange(400)).astype(np.int16))
            w = elastic.calibration_windows(d, 8 * 16, 16, seed=3, sources=("pydoc", "recall_dense"))
            self.assertEqual(tuple(w.shape), (8, 16))
            for i, row in enumerate(w.numpy()):
                lo = 1000 if i % 2 == 0 else 5000
                self.assertTrue(lo <= row.min() and row.max() < lo + 400, (i, row))
                self.assertTrue((np.diff(row) == 1).all())
            default = elastic.calibration_windows(d, 6 * 16, 16, seed=3)
            explicit = elastic.calibration_windows(d, 6 * 16, 16, seed=3, sources=elastic.CALIB_SOURCES)
            self.assertTrue(torch.equal(default, explicit))
            self.assertEqual([int(r[0]) // 1000 for r in default], [0, 1, 2, 0, 1, 2])
            with self.assertRaisesRegex(FileNotFoundError, "nosuch_train.npy"):
                elastic.calibration_windows(d, 64, 16, seed=3, sources=("nosuch",))
            with self.assertRaisesRegex(ValueError, "longer than"):
                elastic.calibration_windows(d, 64, 399, seed=3, sources=("pydoc",))
            with self.assertRaisesRegex(ValueError, "no source"):
                elastic.calibration_windows(d, 64, 16, seed=3, sources=())


if __name__ == "__main__":
    unittest.main()
