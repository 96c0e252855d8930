"""The end-of-episode feedback sentence shared by the multi-turn games."""

from r3l.envs.games.feedback import episode_feedback


def test_success_names_the_steps_and_score():
    assert episode_feedback(success=True, failure=False, moves=4, max_steps=20, score="score 1.00", invalid=2) == (
        "Task completed in 4 steps (score 1.00)."
    )


def test_failure_names_the_step_the_action_the_cause_and_rejected_actions():
    assert episode_feedback(
        success=False, failure=True, moves=3, max_steps=20, score="score 0.25", command="eat carrot"
    ) == ("The task failed at step 3: 'eat carrot' made it impossible to finish (score 0.25).")
    assert episode_feedback(
        success=False,
        failure=True,
        moves=5,
        max_steps=30,
        score="score 0/100",
        invalid=2,
        command="focus on agent",
        cause="scored -100",
        invalid_word="not understood",
    ) == (
        "The task failed at step 5: 'focus on agent' made it impossible to finish "
        "(score 0/100; scored -100; 2 of the 5 actions were not understood)."
    )


def test_running_out_of_steps():
    assert episode_feedback(success=False, failure=False, moves=20, max_steps=20, score="score 0.50") == (
        "The episode ran out of steps (20) at score 0.50 before the task was completed."
    )
    assert episode_feedback(success=False, failure=False, moves=2, max_steps=2, score="score 0.00", invalid=1) == (
        "The episode ran out of steps (2) at score 0.00 before the task was completed; "
        "1 of the 2 actions were not valid."
    )
