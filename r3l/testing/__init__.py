"""Test backends shipped with the package (so the CLI can use them too): the scripted generator, whose text
follows a script while its tokens and log-probabilities come from the real model. Never a default."""
