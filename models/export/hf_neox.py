"""GPT-NeoX (Pythia) and BLOOM as Hugging Face transformers writes them,
exported the way optimum exports them.

GPT-NeoX structure kept (modules written here):
* One query_key_value projection viewed as [batch, seq, heads, 3 * head_dim]
  and sliced per head into q, k, v (the fused layout differs from GPT-2's).
* Partial rotary (rotary_pct = 0.25): only the first head_dim/4 channels of
  q and k are rotated; the rest pass through and are concatenated back.
  cos/sin cached to max_position_embeddings as [1, 1, n, rot] buffers,
  sliced to the key length and gathered by position_ids.
* Parallel residual: x + attn(ln1(x)) + mlp(ln2(x)); exact (erf) GELU.
* Causal mask sliced from a bool buffer, attention_mask as
  (1 - mask) * finfo.min; scores scaled by a norm_factor buffer.

BLOOM structure kept:
* ALiBi instead of positions: slopes per head times
  ((attention_mask.cumsum(-1) - 1) * attention_mask), shaped
  [batch * heads, 1, total], added through baddbmm(alibi, q, k, beta=1,
  alpha=1/sqrt(head_dim)).
* Fused query_key_value viewed as [batch, seq, heads, 3, head_dim].
* The cache layout of that code: key [batch * heads, head_dim, past]
  (stored transposed) and value [batch * heads, past, head_dim]; the
  present key is a Concat on the last axis. Its first axis is a separate
  symbol, batch_heads, since ONNX cannot write batch * heads.
* LayerNorm after the word embedding, tanh-GELU, tied LM head.
"""

import dataclasses
import math

import torch
import torch.nn.functional as F
from torch import nn

import hfdecoder


@dataclasses.dataclass
class NeoXConfig:
    vocab: int = 320
    dim: int = 64
    n_layers: int = 2
    n_heads: int = 4
    rotary_pct: float = 0.25
    max_position_embeddings: int = 256
    rotary_emb_base: int = 10000
    eps: float = 1e-5


class NeoXRotary(nn.Module):
    def __init__(self, dim, max_pos, base):
        super().__init__()
        inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2).float() / dim))
        t = torch.arange(max_pos).float()
        freqs = torch.einsum("i,j->ij", t, inv_freq)
        emb = torch.cat((freqs, freqs), dim=-1)
        self.register_buffer("cos_cached", emb.cos()[None, None, :, :], persistent=False)
        self.register_buffer("sin_cached", emb.sin()[None, None, :, :], persistent=False)

    def forward(self, seq_len):
        return self.cos_cached[:, :, :seq_len, ...], self.sin_cached[:, :, :seq_len, ...]


def rotate_half(x):
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def apply_rotary_pos_emb(q, k, cos, sin, position_ids):
    gather_indices = position_ids[:, None, :, None]  # [bs, 1, seq, 1]
    gather_indices = gather_indices.repeat(1, cos.shape[1], 1, cos.shape[3])
    cos = torch.gather(cos.repeat(gather_indices.shape[0], 1, 1, 1), 2, gather_indices)
    sin = torch.gather(sin.repeat(gather_indices.shape[0], 1, 1, 1), 2, gather_indices)
    return (q * cos) + (rotate_half(q) * sin), (k * cos) + (rotate_half(k) * sin)


class NeoXAttention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        n = cfg.max_position_embeddings
        self.register_buffer("bias", torch.tril(torch.ones((n, n), dtype=torch.bool)).view(1, 1, n, n),
                             persistent=False)
        self.num_attention_heads = cfg.n_heads
        self.head_size = cfg.dim // cfg.n_heads
        self.rotary_ndims = int(self.head_size * cfg.rotary_pct)
        self.rotary_emb = NeoXRotary(self.rotary_ndims, n, cfg.rotary_emb_base)
        self.register_buffer("norm_factor", torch.sqrt(torch.tensor(self.head_size, dtype=torch.float32)),
                             persistent=False)
        self.query_key_value = nn.Linear(cfg.dim, 3 * cfg.dim)
        self.dense = nn.Linear(cfg.dim, cfg.dim)

    def forward(self, hidden_states, attention_mask, position_ids, past_key, past_value):
        qkv = self.query_key_value(hidden_states)
        new_qkv_shape = qkv.size()[:-1] + (self.num_attention_heads, 3 * self.head_size)
        qkv = qkv.view(*new_qkv_shape)
        query = qkv[..., : self.head_size].permute(0, 2, 1, 3)
        key = qkv[..., self.head_size: 2 * self.head_size].permute(0, 2, 1, 3)
        value = qkv[..., 2 * self.head_size:].permute(0, 2, 1, 3)

        query_rot = query[..., : self.rotary_ndims]
        query_pass = query[..., self.rotary_ndims:]
        key_rot = key[..., : self.rotary_ndims]
        key_pass = key[..., self.rotary_ndims:]
        seq_len = key.shape[-2] + past_key.shape[-2]
        cos, sin = self.rotary_emb(seq_len=seq_len)
        query, key = apply_rotary_pos_emb(query_rot, key_rot, cos, sin, position_ids)
        query = torch.cat((query, query_pass), dim=-1)
        key = torch.cat((key, key_pass), dim=-1)

        key = torch.cat((past_key, key), dim=-2)
        value = torch.cat((past_value, value), dim=-2)
        present = (key, value)

        batch_size, num_attention_heads, query_length, attn_head_size = query.size()
        key_length = key.size(-2)
        causal_mask = self.bias[:, :, key_length - query_length: key_length, :key_length]
        query = query.view(batch_size * num_attention_heads, query_length, attn_head_size)
        key = key.view(batch_size * num_attention_heads, key_length, attn_head_size)
        attn_scores = torch.baddbmm(
            torch.zeros(batch_size * num_attention_heads, query_length, key_length, dtype=query.dtype),
            query, key.transpose(1, 2), beta=1.0, alpha=(1.0 / self.norm_factor))
        attn_scores = attn_scores.view(batch_size, num_attention_heads, query_length, key_length)
        mask_value = torch.tensor(torch.finfo(attn_scores.dtype).min, dtype=attn_scores.dtype)
        attn_scores = torch.where(causal_mask, attn_scores, mask_value)
        attn_scores = attn_scores + attention_mask
        attn_weights = F.softmax(attn_scores, dim=-1)
        attn_output = torch.matmul(attn_weights, value)
        attn_output = attn_output.permute(0, 2, 1, 3).contiguous()
        attn_output = attn_output.view(attn_output.size(0), attn_output.size(1),
                                       num_attention_heads * attn_head_size)
        return self.dense(attn_output), present


class NeoXLayer(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.input_layernorm = nn.LayerNorm(cfg.dim, eps=cfg.eps)
        self.post_attention_layernorm = nn.LayerNorm(cfg.dim, eps=cfg.eps)
        self.attention = NeoXAttention(cfg)
        self.dense_h_to_4h = nn.Linear(cfg.dim, 4 * cfg.dim)
        self.dense_4h_to_h = nn.Linear(4 * cfg.dim, cfg.dim)

    def forward(self, hidden_states, attention_mask, position_ids, past_key, past_value):
        attn_output, present = self.attention(self.input_layernorm(hidden_states), attention_mask,
                                              position_ids, past_key, past_value)
        mlp_output = self.dense_4h_to_h(F.gelu(self.dense_h_to_4h(self.post_attention_layernorm(hidden_states))))
        return mlp_output + attn_output + hidden_states, present


class NeoXModel(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.embed_in = nn.Embedding(cfg.vocab, cfg.dim)
        self.layers = nn.ModuleList(NeoXLayer(cfg) for _ in range(cfg.n_layers))
        self.final_layer_norm = nn.LayerNorm(cfg.dim, eps=cfg.eps)
        self.embed_out = nn.Linear(cfg.dim, cfg.vocab, bias=False)

    def forward(self, input_ids, attention_mask, position_ids, *past):
        batch_size = input_ids.shape[0]
        attention_mask = attention_mask.view(batch_size, -1)[:, None, None, :]
        attention_mask = attention_mask.to(dtype=self.embed_in.weight.dtype)
        attention_mask = (1.0 - attention_mask) * torch.finfo(self.embed_in.weight.dtype).min
        hidden_states = self.embed_in(input_ids)
        presents = []
        for i, layer in enumerate(self.layers):
            hidden_states, (k, v) = layer(hidden_states, attention_mask, position_ids, past[2 * i], past[2 * i + 1])
            presents += [k, v]
        return (self.embed_out(self.final_layer_norm(hidden_states)), *presents)


@dataclasses.dataclass
class BloomConfig:
    vocab: int = 320
    dim: int = 64
    n_layers: int = 2
    n_heads: int = 4
    eps: float = 1e-5


def build_alibi_tensor(attention_mask, num_heads, dtype):
    batch_size, seq_length = attention_mask.shape
    closest_power_of_2 = 2 ** math.floor(math.log2(num_heads))
    base = torch.tensor(2 ** (-(2 ** -(math.log2(closest_power_of_2) - 3))), dtype=torch.float32)
    powers = torch.arange(1, 1 + closest_power_of_2, dtype=torch.int32)
    slopes = torch.pow(base, powers)
    arange_tensor = ((attention_mask.cumsum(dim=-1) - 1) * attention_mask)[:, None, :]
    alibi = slopes[..., None] * arange_tensor
    return alibi.reshape(batch_size * num_heads, 1, seq_length).to(dtype)


def bloom_gelu(x):
    return x * 0.5 * (1.0 + torch.tanh(0.79788456 * x * (1 + 0.044715 * x * x)))


class BloomAttention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.hidden_size = cfg.dim
        self.num_heads = cfg.n_heads
        self.head_dim = cfg.dim // cfg.n_heads
        self.inv_norm_factor = 1.0 / math.sqrt(self.head_dim)
        self.query_key_value = nn.Linear(cfg.dim, 3 * cfg.dim, bias=True)
        self.dense = nn.Linear(cfg.dim, cfg.dim)

    def forward(self, hidden_states, residual, alibi, attention_mask, past_key, past_value):
        fused_qkv = self.query_key_value(hidden_states)
        batch_size, seq_length, three_times_hidden_size = fused_qkv.shape
        fused_qkv = fused_qkv.view(batch_size, seq_length, self.num_heads, 3, self.head_dim)
        query_layer, key_layer, value_layer = fused_qkv[..., 0, :], fused_qkv[..., 1, :], fused_qkv[..., 2, :]
        batch_size, q_length, _, _ = query_layer.shape
        query_layer = query_layer.transpose(1, 2).reshape(batch_size * self.num_heads, q_length, self.head_dim)
        key_layer = key_layer.permute(0, 2, 3, 1).reshape(batch_size * self.num_heads, self.head_dim, q_length)
        value_layer = value_layer.transpose(1, 2).reshape(batch_size * self.num_heads, q_length, self.head_dim)
        key_layer = torch.cat((past_key, key_layer), dim=2)
        value_layer = torch.cat((past_value, value_layer), dim=1)
        present = (key_layer, value_layer)
        _, _, kv_length = key_layer.shape
        matmul_result = alibi.baddbmm(batch1=query_layer, batch2=key_layer, beta=1.0, alpha=self.inv_norm_factor)
        attention_scores = matmul_result.view(batch_size, self.num_heads, q_length, kv_length)
        attn_weights = torch.masked_fill(attention_scores, attention_mask, torch.finfo(attention_scores.dtype).min)
        attention_probs = F.softmax(attn_weights, dim=-1, dtype=torch.float32)
        attention_probs_reshaped = attention_probs.view(batch_size * self.num_heads, q_length, kv_length)
        context_layer = torch.bmm(attention_probs_reshaped, value_layer)
        context_layer = context_layer.view(batch_size, self.num_heads, q_length, self.head_dim)
        context_layer = context_layer.permute(0, 2, 1, 3)
        context_layer = context_layer.reshape(batch_size, q_length, self.num_heads * self.head_dim)
        return self.dense(context_layer) + residual, present


class BloomBlock(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.input_layernorm = nn.LayerNorm(cfg.dim, eps=cfg.eps)
        self.self_attention = BloomAttention(cfg)
        self.post_attention_layernorm = nn.LayerNorm(cfg.dim, eps=cfg.eps)
        self.dense_h_to_4h = nn.Linear(cfg.dim, 4 * cfg.dim)
        self.dense_4h_to_h = nn.Linear(4 * cfg.dim, cfg.dim)

    def forward(self, hidden_states, alibi, attention_mask, past_key, past_value):
        layernorm_output = self.input_layernorm(hidden_states)
        attention_output, present = self.self_attention(layernorm_output, hidden_states, alibi, attention_mask,
                                                        past_key, past_value)
        layernorm_output = self.post_attention_layernorm(attention_output)
        output = self.dense_4h_to_h(bloom_gelu(self.dense_h_to_4h(layernorm_output))) + attention_output
        return output, present


class BloomModel(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.word_embeddings = nn.Embedding(cfg.vocab, cfg.dim)
        self.word_embeddings_layernorm = nn.LayerNorm(cfg.dim, eps=cfg.eps)
        self.h = nn.ModuleList(BloomBlock(cfg) for _ in range(cfg.n_layers))
        self.ln_f = nn.LayerNorm(cfg.dim, eps=cfg.eps)

    def forward(self, input_ids, attention_mask, *past):
        batch_size, seq_length = input_ids.shape
        past_key_values_length = past[0].shape[2]
        hidden_states = self.word_embeddings_layernorm(self.word_embeddings(input_ids))
        alibi = build_alibi_tensor(attention_mask, self.cfg.n_heads, dtype=hidden_states.dtype)
        # _prepare_attn_mask: True where a key must NOT be attended.
        mask = torch.ones((seq_length, seq_length + past_key_values_length), dtype=torch.bool)
        mask = torch.triu(mask, diagonal=1 + past_key_values_length)
        causal_mask = mask[None, None, :, :].expand(batch_size, 1, seq_length,
                                                     seq_length + past_key_values_length)
        expanded_mask = ~(attention_mask[:, None, None, :].to(torch.bool))
        combined = expanded_mask | causal_mask
        presents = []
        for i, block in enumerate(self.h):
            hidden_states, (k, v) = block(hidden_states, alibi, combined, past[2 * i], past[2 * i + 1])
            presents += [k, v]
        hidden_states = self.ln_f(hidden_states)
        logits = torch.matmul(hidden_states, self.word_embeddings.weight.t())
        return (logits, *presents)


def _neox():
    cfg = NeoXConfig()
    hd = cfg.dim // cfg.n_heads
    return hfdecoder.Family(
        name="hf_neox", seed=2021, build=lambda: NeoXModel(cfg), config=dataclasses.asdict(cfg),
        inputs=("input_ids", "attention_mask", "position_ids"),
        cache_parts=("key", "value"),
        cache_shape=lambda b, t: [(b, cfg.n_heads, t, hd)] * 2,
        cache_axes=({0: "batch", 2: "past"},) * 2,
        n_layers=cfg.n_layers, vocab=cfg.vocab, gain=2.0,
        structure=(
            "fused query_key_value viewed [b, s, heads, 3 * head_dim], sliced per head",
            "partial rotary: 4 of 16 head channels rotated, tables [1, 1, 256, 4] sliced and "
            "gathered (GatherElements) by position_ids",
            "parallel residual x + attn(ln1(x)) + mlp(ln2(x)), erf-GELU",
            "scores via baddbmm on [b * heads, ...] views, causal bool buffer + where, additive mask"))


def _bloom():
    cfg = BloomConfig()
    hd = cfg.dim // cfg.n_heads
    return hfdecoder.Family(
        name="hf_bloom", seed=2022, build=lambda: BloomModel(cfg), config=dataclasses.asdict(cfg),
        inputs=("input_ids", "attention_mask"),
        cache_parts=("key", "value"),
        cache_shape=lambda b, t: [(b * cfg.n_heads, hd, t), (b * cfg.n_heads, t, hd)],
        cache_axes=({0: "batch_heads", 2: "past"}, {0: "batch_heads", 1: "past"}),
        n_layers=cfg.n_layers, vocab=cfg.vocab,
        extra_symbols=lambda b: {"batch_heads": b * cfg.n_heads}, gain=8.0,
        structure=(
            "ALiBi from attention_mask.cumsum, no position embedding",
            "cache key stored transposed [batch * heads, head_dim, past], value [batch * heads, past, head_dim]",
            "fused query_key_value viewed [b, s, heads, 3, head_dim]",
            "alibi.baddbmm(q, k, beta=1, alpha=1/sqrt(d)), bool mask + masked_fill",
            "embedding LayerNorm, tanh-GELU, tied LM head"))


NEOX = _neox()
BLOOM = _bloom()


def export(out_dir, size="test"):
    return hfdecoder.export_family(NEOX, out_dir)
