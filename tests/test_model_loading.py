"""A model loaded from a folder runs on its own torch layers: transformers 5 swaps in layers fetched from the Hub
where the `kernels` package is installed, which fails on an offline GPU machine (seen on the H200, issue 35)."""

from r3l.models import load_policy


def test_a_saved_model_loads_without_hub_kernels(tiny, tmp_path):
    model, tokenizer = tiny
    model.save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    loaded, _ = load_policy(str(tmp_path), model.dtype)
    assert loaded.use_kernels is False
