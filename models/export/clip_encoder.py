"""The transformer layer shared by clip_vision.py and clip_text.py.

CLIP's two towers use the same pre-LN block:

    x = x + out_proj(attention(layer_norm1(x)))
    x = x + fc2(quick_gelu(fc1(layer_norm2(x))))

with separate q/k/v projections (all with bias), q pre-scaled by
head_dim^-0.5 before the QK^T matmul, and QuickGELU, x * sigmoid(1.702 x),
which exports as Mul/Sigmoid/Mul. Each LayerNorm is one LayerNormalization
node at opset 17 (eps 1e-5).
"""

import torch
from torch import nn


def quick_gelu(x):
    return x * torch.sigmoid(1.702 * x)


class Attention(nn.Module):
    def __init__(self, width, n_heads):
        super().__init__()
        self.n_heads = n_heads
        self.head_dim = width // n_heads
        self.scale = self.head_dim ** -0.5
        self.q_proj = nn.Linear(width, width)
        self.k_proj = nn.Linear(width, width)
        self.v_proj = nn.Linear(width, width)
        self.out_proj = nn.Linear(width, width)

    def heads(self, x):
        b, s, _ = x.shape
        return x.view(b, s, self.n_heads, self.head_dim).transpose(1, 2)

    def forward(self, x, bias=None):
        b, s, d = x.shape
        q = self.heads(self.q_proj(x) * self.scale)
        k = self.heads(self.k_proj(x))
        v = self.heads(self.v_proj(x))
        scores = torch.matmul(q, k.transpose(-1, -2))
        if bias is not None:
            scores = scores + bias
        probs = torch.softmax(scores, dim=-1)
        out = torch.matmul(probs, v).transpose(1, 2).reshape(b, s, d)
        return self.out_proj(out)


class EncoderLayer(nn.Module):
    def __init__(self, width, n_heads, mlp):
        super().__init__()
        self.layer_norm1 = nn.LayerNorm(width)
        self.self_attn = Attention(width, n_heads)
        self.layer_norm2 = nn.LayerNorm(width)
        self.fc1 = nn.Linear(width, mlp)
        self.fc2 = nn.Linear(mlp, width)

    def forward(self, x, bias=None):
        x = x + self.self_attn(self.layer_norm1(x), bias)
        return x + self.fc2(quick_gelu(self.fc1(self.layer_norm2(x))))
