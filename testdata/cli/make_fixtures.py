"""Small ONNX files for tools/tl's tests of hostile or odd models.

Run with Debian's python3 (onnx 1.12): /usr/bin/python3 make_fixtures.py
"""
import onnx
from onnx import TensorProto, helper


def save(graph, name, opset=17):
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], producer_name="tlite-fixture")
    onnx.checker.check_model(m) if opset <= 17 else None
    onnx.save(m, name)


x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n"])
consts = [
    helper.make_node("Constant", [], ["s0"], value=helper.make_tensor("s0v", TensorProto.INT64, [1], [0])),
    helper.make_node("Constant", [], ["e0"], value=helper.make_tensor("e0v", TensorProto.INT64, [1], [0])),
]
# An output with zero elements (a legal empty Slice) beside a normal one.
g = helper.make_graph(consts + [
    helper.make_node("Slice", ["x", "s0", "e0"], ["empty"]),
    helper.make_node("Relu", ["x"], ["y"]),
], "empty_output", [x], [
    helper.make_tensor_value_info("empty", TensorProto.FLOAT, [0]),
    helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n"]),
])
save(g, "empty_output.onnx")

# Outputs whose names sanitise to the same file name.
g = helper.make_graph([
    helper.make_node("Relu", ["x"], ["a/b"]),
    helper.make_node("Neg", ["x"], ["a_b"]),
], "colliding_names", [x], [
    helper.make_tensor_value_info("a/b", TensorProto.FLOAT, ["n"]),
    helper.make_tensor_value_info("a_b", TensorProto.FLOAT, ["n"]),
])
save(g, "colliding_names.onnx")

# A model importing an opset no ONNX release has.
g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "opset99", [x],
                      [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n"])])
save(g, "opset99.onnx", opset=99)
