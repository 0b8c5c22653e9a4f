"""A text tower with an attention_mask input, as Hugging Face exports of
CLIP's text model have, for engine/embed's test that the mask is fed:
text_embeds = [sum(mask), sum(input_ids * mask)] as float32.

    /usr/bin/python3 testdata/embed/make_masked.py testdata/embed
"""
import os
import sys

import onnx
from onnx import TensorProto, helper

out = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(__file__)
ids = helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", 77])
mask = helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["batch", 77])
emb = helper.make_tensor_value_info("text_embeds", TensorProto.FLOAT, ["batch", 2])
nodes = [
    helper.make_node("Constant", [], ["axes"], value=helper.make_tensor("axes_v", TensorProto.INT64, [1], [1])),
    helper.make_node("Cast", ["input_ids"], ["idsf"], to=TensorProto.FLOAT),
    helper.make_node("Cast", ["attention_mask"], ["maskf"], to=TensorProto.FLOAT),
    helper.make_node("Mul", ["idsf", "maskf"], ["masked"]),
    helper.make_node("ReduceSum", ["maskf", "axes"], ["n"], keepdims=1),
    helper.make_node("ReduceSum", ["masked", "axes"], ["s"], keepdims=1),
    helper.make_node("Concat", ["n", "s"], ["text_embeds"], axis=1),
]
g = helper.make_graph(nodes, "masked_text", [ids, mask], [emb])
m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], producer_name="tlite-fixture")
onnx.checker.check_model(m)
onnx.save(m, os.path.join(out, "masked_text.onnx"))
