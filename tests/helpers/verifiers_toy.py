"""Small verifiers (v1) tasksets for tests/test_verifiers_env.py, loaded as 'tests.helpers.verifiers_toy:Class'."""

import verifiers.v1 as vf

SYSTEM = "Answer with the number only."
WEIGHTS = {"correct": 0.75, "brief": 0.25}


class SumData(vf.TaskData):
    answer: str
    a: int


class SumTask(vf.Task[SumData]):
    @vf.reward(weight=WEIGHTS["correct"])
    async def correct(self, trace: vf.Trace) -> float:
        return float(trace.last_reply.strip() == self.data.answer)

    @vf.reward(weight=WEIGHTS["brief"])
    async def brief(self, trace: vf.Trace) -> float:
        return 1.0 / (1.0 + len(trace.last_reply) / 10)


class SumConfig(vf.TasksetConfig):
    num_tasks: int = 10
    offset: int = 0
    few_shot: bool = False
    vary_system: bool = False  # each task its own system prompt


class SumTaskset(vf.Taskset[SumTask, SumConfig]):
    def load(self):
        for i in range(self.config.offset, self.config.offset + self.config.num_tasks):
            question = f"What is {i} + 1?"
            prompt = (
                question
                if not self.config.few_shot
                else [
                    vf.SystemMessage(content="Be brief."),
                    vf.UserMessage(content="What is 1 + 1?"),
                    vf.AssistantMessage(content="2"),
                    vf.UserMessage(content=question),
                ]
            )
            system = f"Task {i}: answer with the number only." if self.config.vary_system else SYSTEM
            yield SumTask(SumData(prompt=prompt, system_prompt=system, answer=str(i + 1), a=i), self.config.task)


class SandboxTask(SumTask):
    async def setup(self, trace, runtime):
        await runtime.run(["true"], {})


class SandboxTaskset(vf.Taskset[SandboxTask, SumConfig]):
    def load(self):
        yield SandboxTask(SumData(prompt="What is 1 + 1?", answer="2", a=1), self.config.task)


__all__ = ["SumTaskset"]
