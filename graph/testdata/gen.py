"""Regenerates the reader's real-exporter fixtures (run with Debian's python3:
/usr/bin/python3 gen.py). Weights follow closed formulas that reader_test.go
recomputes, so the tests check values without trusting the reader.

mlp_dynamic.onnx  torch.onnx.export (opset 17) of flatten -> Linear -> ReLU ->
                  Linear with a dynamic batch axis named "batch".
fp16_ext.onnx     onnx.helper model: float16 MatMul weight and an If whose
                  branches read outer values, saved with external data in
                  fp16_ext.bin.
"""
import numpy as np
import onnx
import torch
from onnx import TensorProto, helper, numpy_helper


class MLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(4, 8)
        self.fc2 = torch.nn.Linear(8, 2)
        with torch.no_grad():
            self.fc1.weight.copy_(torch.arange(32, dtype=torch.float32).reshape(8, 4) / 16 - 1)
            self.fc1.bias.copy_(torch.arange(8, dtype=torch.float32) / 8)
            self.fc2.weight.copy_(torch.arange(16, dtype=torch.float32).reshape(2, 8) / 32)
            self.fc2.bias.copy_(torch.tensor([0.5, -0.5]))

    def forward(self, x):
        x = x.reshape(x.shape[0], -1)
        return self.fc2(torch.relu(self.fc1(x)))


torch.onnx.export(MLP(), torch.zeros(3, 2, 2), "mlp_dynamic.onnx", opset_version=17,
                  input_names=["x"], output_names=["y"],
                  dynamic_axes={"x": {0: "batch"}, "y": {0: "batch"}})

w = (np.arange(12, dtype=np.float32).reshape(3, 4) * 0.25 - 1).astype(np.float16)
then_g = helper.make_graph([helper.make_node("Add", ["m", "bias"], ["t"])], "then", [],
                           [helper.make_tensor_value_info("t", TensorProto.FLOAT16, ["n", 4])])
else_g = helper.make_graph([helper.make_node("Neg", ["m"], ["e"])], "else", [],
                           [helper.make_tensor_value_info("e", TensorProto.FLOAT16, ["n", 4])])
g = helper.make_graph(
    [helper.make_node("MatMul", ["x", "W"], ["m"]),
     helper.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g)],
    "fp16_ext",
    [helper.make_tensor_value_info("x", TensorProto.FLOAT16, ["n", 3]),
     helper.make_tensor_value_info("c", TensorProto.BOOL, [])],
    [helper.make_tensor_value_info("y", TensorProto.FLOAT16, ["n", 4])],
    [numpy_helper.from_array(w, "W"),
     numpy_helper.from_array(np.array([1, 2, 3, 4], dtype=np.float16), "bias")])
m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], producer_name="gen.py")
onnx.checker.check_model(m)
onnx.save_model(m, "fp16_ext.onnx", save_as_external_data=True, all_tensors_to_one_file=True,
                location="fp16_ext.bin", size_threshold=0)
