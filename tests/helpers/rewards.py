"""A reward function with TRL's signature, plugged into the `dataset` environment by tests."""


def vowel_share_reward(prompts, completions, **columns):
    """Share of vowels among a reply's letters: varies even across a random model's replies."""
    rewards = []
    for completion in completions:
        letters = [c for c in completion.lower() if c.isalpha()]
        rewards.append(sum(c in "aeiou" for c in letters) / len(letters) if letters else 0.0)
    return rewards
