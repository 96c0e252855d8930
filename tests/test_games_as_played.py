"""Games as a model can play them (issue 36), on the real games: FrozenLake's map drawn per seed with Gymnasium's
own generator and an intro that is true of the lake; each game's held-out split holding distinct games (FrozenLake
4x4 and 8x8, Sokoban, Mastermind, GuessTheNumber, Minesweeper, TextWorldExpress); structured replies whose moves
have the game's own form; and the repeat rule: an episode stops on a repeated move only when it changes nothing."""

import shutil

import pytest

pytest.importorskip("gymnasium")
pytest.importorskip("textarena")

from gymnasium.envs.toy_text.frozen_lake import generate_random_map

from r3l.agent.episodes import AgentLimits, EpisodeRunner, EpisodeStart, stuck_repeating
from r3l.envs import make
from r3l.envs.games.game_rules import family
from r3l.envs.reply_grammar import ReplyFormat
from r3l.errors import UserError
from r3l.rollout.generator import SamplingParams
from r3l.testing.scripted import ScriptedGenerator


def hidden(env):
    """The TextArena game's own state after a reset (tests only)."""
    return env.game.env.state.game_state


# --- FrozenLake ----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("game_id, size, count", [("FrozenLake-v1", 4, 40), ("FrozenLake8x8-v1", 8, 40)])
def test_frozen_lake_draws_one_random_map_per_seed_and_holds_out_distinct_maps(game_id, size, count):
    env = make("gym", id=game_id, make_args={"is_slippery": False}, test_size=count, train_size=60)
    maps = {}
    for split in ("test", "train"):
        for task in env.tasks(split):
            first = env.reset(task)
            board = [line.replace("[", "").replace("]", "") for line in first.split("\n\n")[1].splitlines()]
            assert board == generate_random_map(size=size, p=0.8, seed=task.data["seed"])  # Gymnasium's own map
            maps.setdefault(split, []).append(tuple(board))
    assert len(set(maps["test"])) == count  # distinct held-out games
    assert not set(maps["test"]) & set(maps["train"])  # none of them trained on
    assert len({task.data["game"] for task in env.tasks("test")}) == count


def test_the_map_settings_and_the_fixed_map():
    big = make("gym", id="FrozenLake-v1", map_size=5, hole_probability=0.5, test_size=3, train_size=3)
    lines = big.reset(big.tasks("test")[0]).split("\n\n")[1].splitlines()
    assert len(lines) == 5 and sum(line.count("H") for line in lines) >= 3
    with pytest.raises(UserError, match="gave only 1 distinct games .* test split of 20"):
        make("gym", id="FrozenLake-v1", fixed_map=True).tasks("test")  # one map: every seed the same game
    same = make("gym", id="FrozenLake-v1", fixed_map=True, distinct_games=False, test_size=2, train_size=2)
    assert len({same.reset(task) for task in same.tasks("test")}) == 1
    for settings, message in [
        (dict(id="FrozenLake-v1", hole_probability=1.0), "hole_probability must be in"),
        (dict(id="FrozenLake-v1", map_size=1), "map_size must be a whole number >= 2"),
        (dict(id="Taxi-v3", map_size=4), "FrozenLake's settings"),
    ]:
        with pytest.raises(UserError, match=message):
            make("gym", **settings)


def test_the_intro_says_whether_the_ice_is_slippery():
    calm = make("gym", id="FrozenLake-v1", make_args={"is_slippery": False}, test_size=1, train_size=1)
    slippery = make("gym", id="FrozenLake-v1", test_size=1, train_size=1)
    assert "The ice is not slippery: every move goes where you send it." in calm.reset(calm.tasks("test")[0])
    assert "The ice is slippery: a move can go sideways." in slippery.reset(slippery.tasks("test")[0])
    assert "may be slippery" not in calm.intro + slippery.intro


# --- distinct held-out games, per game -----------------------------------------------------------------------------
@pytest.mark.parametrize(
    "game_id, size, secret",
    [
        ("Sokoban-v0", 20, lambda state: state["board"]),
        ("Mastermind-v0", 40, lambda state: tuple(state["secret_code"])),
        ("GuessTheNumber-v0", 10, lambda state: state["game_number"]),
    ],
)
def test_textarena_held_out_games_are_distinct_and_never_trained_on(game_id, size, secret):
    env = make("textarena", id=game_id, test_size=size, train_size=30)
    secrets = {}
    for split in ("test", "train"):
        secrets[split] = []
        for task in env.tasks(split):
            env.reset(task)
            secrets[split].append(secret(hidden(env)))
    assert len(set(secrets["test"])) == size and not set(secrets["test"]) & set(secrets["train"])


def test_a_game_with_few_games_says_so_in_one_line():
    with pytest.raises(UserError) as error:  # 1..20: twenty held out leave none to train on
        make("textarena", id="GuessTheNumber-v0").tasks("train")
    assert "gave only 0 games not held out" in str(error.value) and "lower env.args.train_size or test_size" in str(
        error.value
    )


def test_minesweeper_games_differ_by_seed_once_the_mines_are_laid():
    env = make("textarena", id="Minesweeper-v0-small", test_size=12, train_size=4)
    layouts = []
    for task in env.tasks("test"):
        env.reset(task)
        env.step("[2 2]")  # the mines are laid at the first move, from the game's seeded generator
        layouts.append(tuple(map(tuple, env.game.env.grid)))
    assert len(set(layouts)) == 12


@pytest.mark.skipif(shutil.which("java") is None, reason="TextWorldExpress needs Java")
def test_textworld_express_held_out_games_are_distinct():
    env = make("textworld_express", games=["coin", "cookingworld"], test_size=20, train_size=20)
    games = [(task.data["game"], task.data["seed"]) for task in env.tasks("test")]
    train = {(task.data["game"], task.data["seed"], task.data["fold"]) for task in env.tasks("train")}
    assert len(set(games)) == 20 and {task.data["fold"] for task in env.tasks("test")} == {"test"}
    assert not {(game, seed, "test") for game, seed in games} & train
    env.close()


# --- structured replies: a move of the game's own form ------------------------------------------------------------
@pytest.fixture(scope="module")
def follows(tiny):
    pytest.importorskip("xgrammar")
    from r3l.rollout.constraints import Constrainer

    model, tokenizer = tiny
    constrainer = Constrainer(tokenizer, model.config.vocab_size)
    return lambda constraint, text: constrainer.replay(
        constraint, tokenizer(text, add_special_tokens=False)["input_ids"]
    )[1]


@pytest.mark.parametrize(
    "game_id, good, bad",
    [
        ("GuessTheNumber-v0", ["[7]", "[20]"], ["[21]", "seven", "[0]"]),
        ("Mastermind-v0", ["[1 2 3 4]", "[6 5 4 3]"], ["[1 2 3]", "[7 1 2 3]", "[1,2,3,4]"]),
        ("Sokoban-v0", ["[up]", "[left]"], ["up", "[jump]"]),
        ("Minesweeper-v0-small", ["[0 4]", "[3 2]"], ["[5 1]", "[3, 2]"]),
        ("TowerOfHanoi-v0", ["move disk", "[A C]"], ["<b>"]),  # a game r3l does not know: any move text without '<'
    ],
)
def test_structured_moves_have_the_games_own_form(follows, game_id, good, bad):
    env = make("textarena", id=game_id, test_size=2, train_size=2)
    constraint = env.reply_constraint(ReplyFormat(think_chars=20))
    for move in good:
        assert follows(constraint, f"<think>my move</think><action>{move}</action>"), move
    for move in bad:
        assert not follows(constraint, f"<think>my move</think><action>{move}</action>"), move
    assert not follows(constraint, "[7]")  # the tags are part of the form
    assert family("Minesweeper-v0-small") == "Minesweeper" and family("FrozenLake8x8-v1") == "FrozenLake"


# --- the repeat rule ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "actions, observations, stuck",
    [
        (["up", "up", "up"], ["a", "b", "b", "b"], True),  # the first move changed the board, its repeats did not
        (["up", "up", "up"], ["a", "b", "c", "d"], False),  # a corridor: each move goes on
        (["up", "up", "up"], ["a", "b", "c", "c"], False),  # one repeat changed nothing, the other did
        (["left", "up", "Up "], ["a", "a", "a", "a"], False),  # three moves, not one repeated three times
        (["up", "up"], ["a", "a", "a"], False),  # fewer moves than the limit
        (["x", "up", "UP", "up"], ["a", "a", "b", "b", "b"], True),
        ([None, "up", "up"], ["a", "a", "a", "a"], False),
    ],
)
def test_stuck_repeating_on_hand_worked_cases(actions, observations, stuck):
    assert stuck_repeating(actions, observations, limit=3) is stuck


class FixedMove(ScriptedGenerator):
    move = "left"

    def script(self, prompt_text, sample, seed, max_new_tokens=10**6):
        return f"<think>again</think><action>{self.move}</action>"


@pytest.mark.parametrize(
    "move, steps, termination", [("left", 3, "repeated_action"), ("right", 5, "repeated_action"), ("down", 3, "done")]
)
def test_a_repeated_move_stops_an_episode_only_when_it_changes_nothing(tiny, move, steps, termination):
    """The fixed map (SFFF / FHFH / FFFH / HFFG): 'left' from S meets the wall at once (stopped at the third move),
    'right' walks three tiles along the top row and meets it after (stopped at the fifth), 'down' changes the board at
    every move until the hole at (3, 0) ends the game (the old rule stopped it at the third move)."""
    model, tokenizer = tiny
    FixedMove.move = move

    def lake():
        return make(
            "gym",
            id="FrozenLake-v1",
            make_args={"is_slippery": False},
            fixed_map=True,
            distinct_games=False,
            test_size=1,
            train_size=1,
            max_steps=10,
        )

    runner = EpisodeRunner(lake, FixedMove(model, tokenizer), tokenizer, limits=AgentLimits(max_turns=10))
    episode = runner.run([EpisodeStart(lake().tasks("test")[0])], SamplingParams(max_new_tokens=16, seed=0))[0]
    runner.close()
    assert episode.termination == termination and episode.num_steps == steps and not episode.success
    assert ("without changing anything" in episode.feedback) == (termination == "repeated_action")
