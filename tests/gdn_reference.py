"""The gated delta rule one tree node at a time, each from its parent's state (fla's fused-recurrent order): the
reference the GDN tree kernels' tests (tests/test_gdn_*_kernel.py) compare every node's output and state with."""
from __future__ import annotations

import torch


def unit(x: torch.Tensor) -> torch.Tensor:
    return x / torch.sqrt((x * x).sum(-1, keepdim=True) + 1e-6)


def stepwise(q, k, v, g, beta, state, parents):
    """(outputs [N, HV, Dv], states [N, HV, Dk, Dv]) of nodes whose parents are `parents` (-1: the committed state)."""
    outs, states = [], []
    qn, kn = unit(q) * q.shape[-1] ** -0.5, unit(k)
    for i, p in enumerate(parents):
        s = (state if p < 0 else states[p]) * g[i].exp()[:, None, None]
        s = s + kn[i][:, :, None] * ((v[i] - torch.einsum("hkv,hk->hv", s, kn[i])) * beta[i][:, None])[:, None]
        states.append(s)
        outs.append(torch.einsum("hkv,hk->hv", s, qn[i]))
    return torch.stack(outs), torch.stack(states)


def inputs(n: int, hv: int, dk: int, dv: int, device) -> tuple:
    """Random (q, k, v, g, beta, state) of n nodes (g: log decays below 0; state [HV, Dk, Dv])."""
    q, k, v = (torch.randn(n, hv, d, device=device) for d in (dk, dk, dv))
    g, beta = -torch.rand(n, hv, device=device), torch.rand(n, hv, device=device)
    return q, k, v, g, beta, torch.randn(hv, dk, dv, device=device)


def states_errors(node_state, k, solved, state, visible, want_states) -> list[float]:
    """A kernel's commit state build against the reference: after every node, then after the last node in place (as
    a reserved commit writes: out is the state it reads) with its conv window (odd channels): max errors of the
    states, of the in-place state and of the window."""
    n, device = k.shape[0], k.device
    built = torch.cat([node_state(k, solved, state, visible, torch.tensor([i], device=device)) for i in range(n)])
    into = state.clone()[None]
    bank, conv_index = torch.randn(37, 4 + n, device=device), torch.randint(0, 4 + n, (n, 4), device=device)
    window = torch.zeros(37, 4, device=device)
    node_state(k, solved, into[0], visible, torch.tensor([n - 1], device=device), out=into,
               conv=(bank, conv_index, window))
    return [(built - want_states).abs().max().item(), (into[0] - want_states[n - 1]).abs().max().item(),
            (window - bank[:, conv_index[n - 1]]).abs().max().item()]
