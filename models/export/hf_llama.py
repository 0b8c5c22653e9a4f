"""LLaMA/Mistral as Hugging Face transformers (4.3x) writes it, exported the
way optimum exports it.

Structure kept from that modeling code (modules written here):
* Rotary tables cached up to max_position_embeddings (cos_cached/sin_cached
  buffers), sliced to the key length and gathered by position_ids
  (`cos[:kv_len][position_ids]`): the graph holds a Slice clamped at the
  table size and a Gather into a position table.
* repeat_kv reads (batch, kv_heads, slen, head_dim) from `.shape` and does
  `x[:, :, None].expand(...).reshape(...)`: Shape nodes on the cache.
* The 4-D additive mask is built like `_prepare_4d_causal_attention_mask`:
  a [seq, seq] causal block from a full finfo.min matrix and masked_fill,
  zeros for the past columns, expanded to [batch, 1, seq, total], plus the
  inverted attention_mask expanded the same way.
* Scores `q @ k.transpose(2, 3) / sqrt(head_dim)`, mask added, softmax in
  float32, RMSNorm, SwiGLU, separate q/k/v/o projections without bias.
* `qkv_bias=True` (hf_qwen2) adds the q/k/v biases Qwen2 has;
  `repeat="interleave"` (hf_gqa_interleave) repeats K/V with
  `repeat_interleave`. torch 1.13 exports it, along the fixed-size head
  axis, as Split + Expand + Reshape whose target shapes are constants
  written at export (with -1 standing for the dynamic sizes), so the graph
  cannot follow the cache length: tlite's shape inference proves total = 2
  and ONNX Runtime rejects the first MatMul. It is kept as the exporter
  mistake case; its reference data is PyTorch's, which the graph cannot
  reproduce.

Inputs: input_ids, attention_mask [batch, total], position_ids, cache
past_key_values.{i}.key/.value [batch, kv_heads, past, head_dim].
"""

import dataclasses
import math

import torch
import torch.nn.functional as F
from torch import nn

import hfdecoder


@dataclasses.dataclass
class Config:
    vocab: int = 320
    dim: int = 64
    n_layers: int = 2
    n_heads: int = 4
    n_kv_heads: int = 2
    ffn: int = 176
    max_position_embeddings: int = 256
    rope_theta: float = 10000.0
    eps: float = 1e-6
    qkv_bias: bool = False
    repeat: str = "expand"  # or "interleave"


class RMSNorm(nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(dim))
        self.variance_epsilon = eps

    def forward(self, hidden_states):
        variance = hidden_states.pow(2).mean(-1, keepdim=True)
        hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
        return self.weight * hidden_states


class RotaryEmbedding(nn.Module):
    def __init__(self, dim, max_pos, base):
        super().__init__()
        inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2).float() / dim))
        t = torch.arange(max_pos).float()
        freqs = torch.outer(t, inv_freq)
        emb = torch.cat((freqs, freqs), dim=-1)
        self.register_buffer("cos_cached", emb.cos(), persistent=False)
        self.register_buffer("sin_cached", emb.sin(), persistent=False)

    def forward(self, x, seq_len):
        return self.cos_cached[:seq_len], self.sin_cached[:seq_len]


def rotate_half(x):
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def apply_rotary_pos_emb(q, k, cos, sin, position_ids):
    cos = cos[position_ids].unsqueeze(1)  # [bs, 1, seq, dim]
    sin = sin[position_ids].unsqueeze(1)
    return (q * cos) + (rotate_half(q) * sin), (k * cos) + (rotate_half(k) * sin)


def repeat_kv(hidden_states, n_rep):
    batch, num_key_value_heads, slen, head_dim = hidden_states.shape
    if n_rep == 1:
        return hidden_states
    hidden_states = hidden_states[:, :, None, :, :].expand(batch, num_key_value_heads, n_rep, slen, head_dim)
    return hidden_states.reshape(batch, num_key_value_heads * n_rep, slen, head_dim)


class Attention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.num_heads = cfg.n_heads
        self.head_dim = cfg.dim // cfg.n_heads
        self.num_key_value_heads = cfg.n_kv_heads
        self.num_key_value_groups = cfg.n_heads // cfg.n_kv_heads
        b = cfg.qkv_bias
        self.q_proj = nn.Linear(cfg.dim, self.num_heads * self.head_dim, bias=b)
        self.k_proj = nn.Linear(cfg.dim, self.num_key_value_heads * self.head_dim, bias=b)
        self.v_proj = nn.Linear(cfg.dim, self.num_key_value_heads * self.head_dim, bias=b)
        self.o_proj = nn.Linear(self.num_heads * self.head_dim, cfg.dim, bias=False)
        self.rotary_emb = RotaryEmbedding(self.head_dim, cfg.max_position_embeddings, cfg.rope_theta)

    def forward(self, hidden_states, attention_mask, position_ids, past_key, past_value):
        bsz, q_len, _ = hidden_states.size()
        query_states = self.q_proj(hidden_states)
        key_states = self.k_proj(hidden_states)
        value_states = self.v_proj(hidden_states)
        query_states = query_states.view(bsz, q_len, self.num_heads, self.head_dim).transpose(1, 2)
        key_states = key_states.view(bsz, q_len, self.num_key_value_heads, self.head_dim).transpose(1, 2)
        value_states = value_states.view(bsz, q_len, self.num_key_value_heads, self.head_dim).transpose(1, 2)

        kv_seq_len = key_states.shape[-2] + past_key.shape[-2]
        cos, sin = self.rotary_emb(value_states, seq_len=kv_seq_len)
        query_states, key_states = apply_rotary_pos_emb(query_states, key_states, cos, sin, position_ids)

        key_states = torch.cat([past_key, key_states], dim=2)
        value_states = torch.cat([past_value, value_states], dim=2)
        present = (key_states, value_states)

        if self.cfg.repeat == "interleave":
            key_states = key_states.repeat_interleave(self.num_key_value_groups, dim=1)
            value_states = value_states.repeat_interleave(self.num_key_value_groups, dim=1)
        else:
            key_states = repeat_kv(key_states, self.num_key_value_groups)
            value_states = repeat_kv(value_states, self.num_key_value_groups)

        attn_weights = torch.matmul(query_states, key_states.transpose(2, 3)) / math.sqrt(self.head_dim)
        attn_weights = attn_weights + attention_mask
        attn_weights = F.softmax(attn_weights, dim=-1, dtype=torch.float32).to(query_states.dtype)
        attn_output = torch.matmul(attn_weights, value_states)
        attn_output = attn_output.transpose(1, 2).contiguous()
        attn_output = attn_output.reshape(bsz, q_len, self.num_heads * self.head_dim)
        return self.o_proj(attn_output), present


class MLP(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.gate_proj = nn.Linear(cfg.dim, cfg.ffn, bias=False)
        self.up_proj = nn.Linear(cfg.dim, cfg.ffn, bias=False)
        self.down_proj = nn.Linear(cfg.ffn, cfg.dim, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.self_attn = Attention(cfg)
        self.mlp = MLP(cfg)
        self.input_layernorm = RMSNorm(cfg.dim, cfg.eps)
        self.post_attention_layernorm = RMSNorm(cfg.dim, cfg.eps)

    def forward(self, hidden_states, attention_mask, position_ids, past_key, past_value):
        residual = hidden_states
        hidden_states = self.input_layernorm(hidden_states)
        hidden_states, present = self.self_attn(hidden_states, attention_mask, position_ids, past_key, past_value)
        hidden_states = residual + hidden_states
        residual = hidden_states
        hidden_states = self.mlp(self.post_attention_layernorm(hidden_states))
        return residual + hidden_states, present


def make_causal_mask(bsz, tgt_len, past_key_values_length, dtype):
    mask = torch.full((tgt_len, tgt_len), torch.finfo(dtype).min)
    mask_cond = torch.arange(mask.size(-1))
    mask.masked_fill_(mask_cond < (mask_cond + 1).view(mask.size(-1), 1), 0)
    mask = mask.to(dtype)
    if past_key_values_length > 0:
        mask = torch.cat([torch.zeros(tgt_len, past_key_values_length, dtype=dtype), mask], dim=-1)
    return mask[None, None, :, :].expand(bsz, 1, tgt_len, tgt_len + past_key_values_length)


def expand_mask(mask, dtype, tgt_len):
    bsz, src_len = mask.size()
    expanded = mask[:, None, None, :].expand(bsz, 1, tgt_len, src_len).to(dtype)
    inverted = 1.0 - expanded
    return inverted.masked_fill(inverted.to(torch.bool), torch.finfo(dtype).min)


class Model(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.embed_tokens = nn.Embedding(cfg.vocab, cfg.dim)
        self.layers = nn.ModuleList(DecoderLayer(cfg) for _ in range(cfg.n_layers))
        self.norm = RMSNorm(cfg.dim, cfg.eps)
        self.lm_head = nn.Linear(cfg.dim, cfg.vocab, bias=False)

    def forward(self, input_ids, attention_mask, position_ids, *past_key_values):
        batch_size, seq_length = input_ids.shape
        past_key_values_length = past_key_values[0].shape[2]
        inputs_embeds = self.embed_tokens(input_ids)
        # The traced graph always takes the past > 0 branch (the export
        # traces with a non-empty cache), as optimum's exports do.
        combined = make_causal_mask(batch_size, seq_length, past_key_values_length, inputs_embeds.dtype)
        expanded = expand_mask(attention_mask, inputs_embeds.dtype, seq_length)
        attn_mask = expanded + combined
        hidden_states = inputs_embeds
        presents = []
        for i, layer in enumerate(self.layers):
            hidden_states, (k, v) = layer(hidden_states, attn_mask, position_ids,
                                          past_key_values[2 * i], past_key_values[2 * i + 1])
            presents += [k, v]
        logits = self.lm_head(self.norm(hidden_states))
        return (logits, *presents)


def family(name, seed, cfg, structure, gain):
    hd = cfg.dim // cfg.n_heads
    return hfdecoder.Family(
        name=name, seed=seed, build=lambda: Model(cfg), config=dataclasses.asdict(cfg),
        inputs=("input_ids", "attention_mask", "position_ids"),
        cache_parts=("key", "value"),
        cache_shape=lambda b, t: [(b, cfg.n_kv_heads, t, hd)] * 2,
        cache_axes=({0: "batch", 2: "past"},) * 2,
        n_layers=cfg.n_layers, vocab=cfg.vocab, structure=structure, gain=gain)


COMMON = (
    "rotary cos/sin tables cached to max_position_embeddings=256, sliced [:past+seq] and gathered by position_ids",
    "repeat_kv: sizes from .shape, x[:, :, None].expand(...).reshape(...)",
    "4-D mask as _prepare_4d_causal_attention_mask: full(finfo.min) + masked_fill causal block, "
    "zeros for past columns, plus inverted attention_mask",
    "scores q @ k.transpose(2, 3) / sqrt(d) + mask, softmax in fp32, RMSNorm, SwiGLU",
)

LLAMA = family("hf_llama", 2001, Config(), COMMON + ("GQA 4 query heads on 2 KV heads",), 5.0)
QWEN2 = family("hf_qwen2", 2002, Config(qkv_bias=True, n_kv_heads=1, vocab=300, rope_theta=1e6, ffn=160),
               COMMON + ("q/k/v projections with bias (Qwen2)", "4 query heads on 1 KV head"), 3.0)
GQA_INTERLEAVE = family(
    "hf_gqa_interleave", 2003, Config(repeat="interleave", vocab=288),
    COMMON[:1] + COMMON[2:] + (
        "GQA by k.repeat_interleave(n_rep, dim=1): torch 1.13 writes constant target shapes into the "
        "export, which cannot follow the dynamic cache length (the exporter mistake)",), 5.0)


def export(out_dir, size="test"):
    return hfdecoder.export_family(LLAMA, out_dir)
