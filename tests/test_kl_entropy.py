"""KL estimators, entropy and token log-probabilities on hand-computed numbers."""

import math

import pytest
import torch

from r3l.algorithms import KL_ESTIMATORS, entropy_from_logits, kl_penalty, token_logprobs
from r3l.errors import UserError

LOGP = torch.tensor([[-1.0, -2.0]])
REF = torch.tensor([[-1.5, -1.0]])  # logp - ref = [.5, -1]


def test_k1_k2_k3_values():
    assert kl_penalty(LOGP, REF, "k1").flatten().tolist() == pytest.approx([0.5, -1.0])
    assert kl_penalty(LOGP, REF, "k2").flatten().tolist() == pytest.approx([0.125, 0.5])  # .5*.25, .5*1
    # ref - logp = [-.5, 1]: e^-.5 + .5 - 1 = .106531; e^1 - 1 - 1 = .718282
    assert kl_penalty(LOGP, REF, "k3").flatten().tolist() == pytest.approx([0.106531, 0.718282], abs=1e-6)


def test_equal_policies_give_zero():
    for kind in ("k1", "k2", "k3"):
        assert kl_penalty(LOGP, LOGP.clone(), kind).tolist() == [[0.0, 0.0]]


def test_k2_k3_nonnegative_and_finite():
    gen = torch.Generator().manual_seed(0)
    a, b = torch.randn(4, 5, generator=gen) * 3, torch.randn(4, 5, generator=gen) * 3
    assert (kl_penalty(a, b, "k2") >= 0).all()
    assert (kl_penalty(a, b, "k3") >= 0).all()
    assert torch.isfinite(kl_penalty(torch.tensor([-100.0]), torch.tensor([0.0]), "k3")).all()


def test_k1_k3_unbiased_exact_expectation():
    # p = [.5, .25, .25], q = [.25, .25, .5]: KL(p||q) = .5 ln 2 + 0 + .25 ln .5 = .25 ln 2 = 0.173287
    p = torch.tensor([0.5, 0.25, 0.25])
    q = torch.tensor([0.25, 0.25, 0.5])
    for kind in ("k1", "k3"):
        expectation = float((p * kl_penalty(p.log(), q.log(), kind)).sum())
        assert expectation == pytest.approx(0.173287, abs=1e-6)
    # k2 is biased: E = .5*(.5*ln2^2 + .25*ln2^2) = .375*0.480453 = 0.180170
    assert float((p * kl_penalty(p.log(), q.log(), "k2")).sum()) == pytest.approx(0.180170, abs=1e-6)


def test_kl_errors():
    assert set(KL_ESTIMATORS.names()) == {"k1", "k2", "k3"}
    with pytest.raises(UserError, match="unknown KL estimator 'k4'"):
        kl_penalty(LOGP, REF, "k4")
    with pytest.raises(ValueError, match="same shape"):
        kl_penalty(LOGP, REF[:, :1], "k1")


# ---------------------------------------------------------------- entropy
def test_entropy_uniform_is_log_v():
    out = entropy_from_logits(torch.zeros(2, 3, 4))
    assert out.shape == (2, 3)
    assert out.flatten().tolist() == pytest.approx([1.386294] * 6, abs=1e-6)  # ln 4


def test_entropy_hand_case_stable_for_large_logits():
    # p = [.25, .75]: H = .25 ln 4 + .75 ln(4/3) = .346574 + .215762 = .562335
    logits = torch.tensor([[[0.0, math.log(3)], [1000.0, 1000.0 + math.log(3)]]])
    # (float32 spacing near 1000 is 6e-5, so 1000 + ln 3 itself is only that accurate)
    assert entropy_from_logits(logits).flatten().tolist() == pytest.approx([0.562335, 0.562335], abs=1e-4)


def test_entropy_banned_tokens_and_bf16():
    # -inf logit has probability 0: entropy of the remaining uniform pair = ln 2
    logits = torch.tensor([[[0.0, 0.0, -float("inf")]]])
    assert entropy_from_logits(logits).flatten().tolist() == pytest.approx([0.693147], abs=1e-6)
    out = entropy_from_logits(torch.zeros(1, 2, 8, dtype=torch.bfloat16))
    assert out.dtype == torch.float32
    assert out.flatten().tolist() == pytest.approx([2.079442] * 2, abs=1e-6)  # ln 8


def test_entropy_temperature():
    # logits [0, ln 3] / 2 -> p = [1, √3]/(1+√3) = [.366025, .633975]
    # -ln p = [1.005053, .455746]; H = .366025*1.005053 + .633975*.455746 = .367875 + .288931 = .656806
    logits = torch.tensor([[[0.0, math.log(3)]]])
    assert entropy_from_logits(logits, temperature=2.0).item() == pytest.approx(0.656806, abs=1e-5)


# ---------------------------------------------------------------- token log-probabilities
def test_token_logprobs_hand_case():
    logits = torch.tensor([[[0.0, math.log(3)], [0.0, math.log(3)]]])
    tokens = torch.tensor([[1, 0]])
    assert token_logprobs(logits, tokens).flatten().tolist() == pytest.approx(
        [math.log(0.75), math.log(0.25)], abs=1e-6
    )
    # temperature 2: p1 = √3/(1+√3) = .633975 -> -.455746; p0 = .366025 -> -1.005053
    assert token_logprobs(logits, tokens, temperature=2.0).flatten().tolist() == pytest.approx(
        [-0.455746, -1.005053], abs=1e-5
    )


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_token_logprobs_matches_log_softmax(temperature):
    gen = torch.Generator().manual_seed(1)
    logits = torch.randn(2, 5, 11, generator=gen) * 4
    tokens = torch.randint(0, 11, (2, 5), generator=gen)
    reference = torch.log_softmax(logits / temperature, dim=-1).gather(-1, tokens.unsqueeze(-1)).squeeze(-1)
    assert torch.allclose(token_logprobs(logits, tokens, temperature), reference, atol=1e-5)
    # chunked path (2 rows per chunk) gives the same numbers
    assert torch.allclose(token_logprobs(logits, tokens, temperature, max_chunk_elements=22), reference, atol=1e-5)
    assert torch.allclose(entropy_from_logits(logits, max_chunk_elements=22), entropy_from_logits(logits), atol=1e-6)


def test_token_logprobs_gradient_and_dtype():
    logits = torch.zeros(1, 1, 4, requires_grad=True)
    out = token_logprobs(logits, torch.tensor([[2]]))
    assert out.item() == pytest.approx(-1.386294, abs=1e-6)  # ln(1/4)
    out.sum().backward()
    # d log_softmax_k / d logit_j = 1[j=k] - p_j = [-.25, -.25, .75, -.25]
    assert logits.grad.flatten().tolist() == pytest.approx([-0.25, -0.25, 0.75, -0.25])
    half = token_logprobs(torch.zeros(1, 2, 4, dtype=torch.bfloat16), torch.tensor([[0, 3]]))
    assert half.dtype == torch.float32


def test_token_logprobs_errors():
    with pytest.raises(ValueError, match="temperature"):
        token_logprobs(torch.zeros(1, 1, 2), torch.tensor([[0]]), temperature=0.0)
    with pytest.raises(ValueError, match="tokens"):
        token_logprobs(torch.zeros(1, 2, 2), torch.tensor([[0]]))
