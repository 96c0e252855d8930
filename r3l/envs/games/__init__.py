"""What the game environments share: the text-game base (admissible actions, feedback), Java simulators, the
Gymnasium, TextArena and OpenEnv adapters, and the rules that make a game playable by a language model."""
