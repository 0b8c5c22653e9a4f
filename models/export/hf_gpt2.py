"""GPT-2 and GPTBigCode (multi-query) as Hugging Face transformers writes
them, exported the way optimum exports them.

GPT-2 structure kept (modules written here):
* Conv1D: weight [nx, nf], `addmm(bias, x.view(-1, nx), weight)` and a view
  back with sizes from `x.size()`: Gemm between two Reshapes fed by Shape.
* One c_attn projection split with `.split(embed_dim, dim=2)`, heads split
  by view/permute; the score product is `query @ key.transpose(-1, -2)`.
* Positions are not an input: `arange(past_length, past_length + seq)` from
  the cache length, into a learned position table (wpe, 256 rows).
* Causal mask sliced from a [1, 1, n_positions, n_positions] bool buffer,
  `bias[:, :, key_length - query_length:key_length, :key_length]`, applied
  with torch.where against a finfo.min scalar made with torch.full; the
  attention_mask input becomes `(1 - mask) * finfo.min` added to the scores.
* Scores divided by `torch.full([], value.size(-1) ** 0.5)`, tanh-GELU
  written out, tied LM head.

GPTBigCode (multi_query=True) differs: one c_attn projection to
embed_dim + 2 * head_dim, a single combined key_value cache per layer
[batch, past, 2 * head_dim] (optimum's past_key_values.{i}.key_value),
query folded to [batch, seq * heads, head_dim] and multiplied by the one
shared key, position_ids as an input into the learned table.
"""

import dataclasses
import math

import torch
from torch import nn

import hfdecoder


@dataclasses.dataclass
class Config:
    vocab: int = 320
    n_positions: int = 256
    dim: int = 64
    n_layers: int = 2
    n_heads: int = 4
    eps: float = 1e-5
    multi_query: bool = False


class Conv1D(nn.Module):
    def __init__(self, nf, nx):
        super().__init__()
        self.nf = nf
        self.weight = nn.Parameter(torch.randn(nx, nf) * 0.08)
        self.bias = nn.Parameter(torch.randn(nf) * 0.02)

    def forward(self, x):
        size_out = x.size()[:-1] + (self.nf,)
        x = torch.addmm(self.bias, x.view(-1, x.size(-1)), self.weight)
        return x.view(size_out)


def gelu_new(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


class Attention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        n = cfg.n_positions
        self.register_buffer("bias", torch.tril(torch.ones((n, n), dtype=torch.bool)).view(1, 1, n, n),
                             persistent=False)
        self.embed_dim = cfg.dim
        self.num_heads = cfg.n_heads
        self.head_dim = cfg.dim // cfg.n_heads
        self.c_attn = Conv1D(3 * self.embed_dim, self.embed_dim)
        self.c_proj = Conv1D(self.embed_dim, self.embed_dim)

    def _attn(self, query, key, value, attention_mask):
        attn_weights = torch.matmul(query, key.transpose(-1, -2))
        attn_weights = attn_weights / torch.full([], value.size(-1) ** 0.5, dtype=attn_weights.dtype)
        query_length, key_length = query.size(-2), key.size(-2)
        causal_mask = self.bias[:, :, key_length - query_length: key_length, :key_length]
        mask_value = torch.full([], torch.finfo(attn_weights.dtype).min, dtype=attn_weights.dtype)
        attn_weights = torch.where(causal_mask, attn_weights.to(attn_weights.dtype), mask_value)
        attn_weights = attn_weights + attention_mask
        attn_weights = nn.functional.softmax(attn_weights, dim=-1)
        return torch.matmul(attn_weights, value)

    def _split_heads(self, tensor, num_heads, attn_head_size):
        new_shape = tensor.size()[:-1] + (num_heads, attn_head_size)
        return tensor.view(new_shape).permute(0, 2, 1, 3)

    def _merge_heads(self, tensor, num_heads, attn_head_size):
        tensor = tensor.permute(0, 2, 1, 3).contiguous()
        new_shape = tensor.size()[:-2] + (num_heads * attn_head_size,)
        return tensor.view(new_shape)

    def forward(self, hidden_states, attention_mask, past_key, past_value):
        query, key, value = self.c_attn(hidden_states).split(self.embed_dim, dim=2)
        query = self._split_heads(query, self.num_heads, self.head_dim)
        key = self._split_heads(key, self.num_heads, self.head_dim)
        value = self._split_heads(value, self.num_heads, self.head_dim)
        key = torch.cat((past_key, key), dim=-2)
        value = torch.cat((past_value, value), dim=-2)
        present = (key, value)
        attn_output = self._attn(query, key, value, attention_mask)
        attn_output = self._merge_heads(attn_output, self.num_heads, self.head_dim)
        return self.c_proj(attn_output), present


class MQAttention(nn.Module):
    """GPTBigCode's attention with multi_query=True."""

    def __init__(self, cfg):
        super().__init__()
        n = cfg.n_positions
        self.register_buffer("bias", torch.tril(torch.ones((n, n), dtype=torch.bool)).view(1, 1, n, n),
                             persistent=False)
        self.embed_dim = cfg.dim
        self.num_heads = cfg.n_heads
        self.head_dim = cfg.dim // cfg.n_heads
        self.kv_dim = self.head_dim
        self.c_attn = nn.Linear(self.embed_dim, self.embed_dim + 2 * self.kv_dim)
        self.c_proj = nn.Linear(self.embed_dim, self.embed_dim)

    def _attn(self, query, key, value, causal_mask, attention_mask):
        batch_size = query.size(0)
        query_length = query.size(1)
        key_length = key.size(-1)
        # [b, s, h * d] -> [b, s * h, d]: every head of every query row
        # shares the one key.
        query = query.reshape(batch_size, query_length * self.num_heads, self.head_dim)
        attn_weights = torch.bmm(query, key) / math.sqrt(self.head_dim)
        attn_weights = attn_weights.view(batch_size, query_length, self.num_heads, key_length)
        mask_value = torch.full([], torch.finfo(attn_weights.dtype).min, dtype=attn_weights.dtype)
        attn_weights = torch.where(causal_mask, attn_weights, mask_value)
        attn_weights = attn_weights + attention_mask
        attn_weights = nn.functional.softmax(attn_weights, dim=-1)
        attn_weights = attn_weights.view(batch_size, query_length * self.num_heads, key_length)
        attn_output = torch.bmm(attn_weights, value)
        return attn_output.view(batch_size, query_length, self.num_heads * self.head_dim)

    def forward(self, hidden_states, attention_mask, layer_past):
        query, key_value = self.c_attn(hidden_states).split((self.embed_dim, 2 * self.kv_dim), dim=2)
        key_value = torch.cat((layer_past, key_value), dim=-2)
        present = key_value
        key, value = key_value.split((self.head_dim, self.head_dim), dim=-1)
        query_length, key_length = query.size(1), key.size(1)
        causal = self.bias[:, :, key_length - query_length: key_length, :key_length]
        causal = causal.transpose(1, 2)  # [1, s, 1, total]
        attn_output = self._attn(query, key.transpose(-1, -2), value, causal, attention_mask)
        return self.c_proj(attn_output), present


class MLP(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        if cfg.multi_query:
            self.c_fc = nn.Linear(cfg.dim, 4 * cfg.dim)
            self.c_proj = nn.Linear(4 * cfg.dim, cfg.dim)
        else:
            self.c_fc = Conv1D(4 * cfg.dim, cfg.dim)
            self.c_proj = Conv1D(cfg.dim, 4 * cfg.dim)

    def forward(self, x):
        return self.c_proj(gelu_new(self.c_fc(x)))


class Block(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.mq = cfg.multi_query
        self.ln_1 = nn.LayerNorm(cfg.dim, eps=cfg.eps)
        self.attn = MQAttention(cfg) if cfg.multi_query else Attention(cfg)
        self.ln_2 = nn.LayerNorm(cfg.dim, eps=cfg.eps)
        self.mlp = MLP(cfg)

    def forward(self, hidden_states, attention_mask, past):
        residual = hidden_states
        h = self.ln_1(hidden_states)
        attn_output, present = self.attn(h, attention_mask, *past)
        hidden_states = attn_output + residual
        residual = hidden_states
        hidden_states = residual + self.mlp(self.ln_2(hidden_states))
        return hidden_states, present


class GPT2Model(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.wte = nn.Embedding(cfg.vocab, cfg.dim)
        self.wpe = nn.Embedding(cfg.n_positions, cfg.dim)
        self.h = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layers))
        self.ln_f = nn.LayerNorm(cfg.dim, eps=cfg.eps)
        with torch.no_grad():
            self.wte.weight.normal_(0.0, 0.3)
            self.wpe.weight.normal_(0.0, 0.1)

    def forward(self, input_ids, attention_mask, *rest):
        cfg = self.cfg
        input_shape = input_ids.size()
        batch_size = input_ids.shape[0]
        if cfg.multi_query:
            position_ids, past = rest[0], rest[1:]
            layers_past = [(past[i],) for i in range(cfg.n_layers)]
            # GPTBigCode: [batch, 1, 1, total] for the [b, s, h, total] scores
            attention_mask = attention_mask.view(batch_size, -1)[:, None, None, :]
        else:
            past = rest
            layers_past = [(past[2 * i], past[2 * i + 1]) for i in range(cfg.n_layers)]
            past_length = past[0].size(-2)
            position_ids = torch.arange(past_length, input_shape[-1] + past_length, dtype=torch.long)
            position_ids = position_ids.unsqueeze(0)
            attention_mask = attention_mask.view(batch_size, -1)[:, None, None, :]
        attention_mask = attention_mask.to(dtype=self.wte.weight.dtype)
        attention_mask = (1.0 - attention_mask) * torch.finfo(self.wte.weight.dtype).min
        hidden_states = self.wte(input_ids) + self.wpe(position_ids)
        presents = []
        for block, lp in zip(self.h, layers_past):
            hidden_states, present = block(hidden_states, attention_mask, lp)
            presents += list(present) if isinstance(present, tuple) else [present]
        hidden_states = self.ln_f(hidden_states)
        logits = torch.matmul(hidden_states, self.wte.weight.t())  # tied lm_head
        return (logits, *presents)


def _gpt2():
    cfg = Config()
    hd = cfg.dim // cfg.n_heads
    return hfdecoder.Family(
        name="hf_gpt2", seed=2011, build=lambda: GPT2Model(cfg), config=dataclasses.asdict(cfg),
        inputs=("input_ids", "attention_mask"),
        cache_parts=("key", "value"),
        cache_shape=lambda b, t: [(b, cfg.n_heads, t, hd)] * 2,
        cache_axes=({0: "batch", 2: "past"},) * 2,
        n_layers=cfg.n_layers, vocab=cfg.vocab, gain=3.0,
        structure=(
            "Conv1D: addmm(bias, x.view(-1, nx), W[nx, nf]).view(size_out) (Gemm between Reshapes)",
            "fused c_attn split(embed_dim, dim=2); heads by view/permute",
            "K transposed before the score MatMul: query @ key.transpose(-1, -2)",
            "positions arange(past, past + seq) from the cache length into a 256-row learned table",
            "causal mask bias[:, :, total - seq:total, :total] from a bool buffer + torch.where; "
            "(1 - attention_mask) * finfo.min added",
            "tanh-GELU, tied LM head"))


def _bigcode():
    cfg = Config(multi_query=True, vocab=300)
    hd = cfg.dim // cfg.n_heads
    return hfdecoder.Family(
        name="hf_bigcode_mqa", seed=2012, build=lambda: GPT2Model(cfg), config=dataclasses.asdict(cfg),
        inputs=("input_ids", "attention_mask", "position_ids"),
        cache_parts=("key_value",),
        cache_shape=lambda b, t: [(b, t, 2 * hd)],
        cache_axes=({0: "batch", 1: "past"},),
        n_layers=cfg.n_layers, vocab=cfg.vocab, gain=3.0,
        structure=(
            "multi-query attention: one K/V head shared by 4 query heads",
            "one combined cache per layer, key_value [batch, total, 2 * head_dim], split after the Concat",
            "query folded to [batch, seq * heads, head_dim], bmm with the transposed key",
            "position_ids input into a 256-row learned table",
            "causal mask sliced from a bool buffer, transposed to [1, seq, 1, total]"))


GPT2 = _gpt2()
BIGCODE = _bigcode()


def export(out_dir, size="test"):
    return hfdecoder.export_family(GPT2, out_dir)
