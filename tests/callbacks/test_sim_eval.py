"""SimEvalCallback's eval at the start of training: the base policy's at step 0, none again
when a run resumes after its evals began (a preempted run resumed at step 12 used to score
both scene sets again, 4 minutes on the CPU tabletop task)."""

from __future__ import annotations

from callbacks.sim_eval import SimEvalCallback


def test_start_eval_at_step_0_and_on_a_resume_without_history():
    cb = SimEvalCallback(every_n_steps=10)
    assert cb.start_due(0)
    assert cb.start_due(12)  # a checkpoint without eval history: score where it starts
    cb.load_state_dict({"history": [{"step": 0, "sim/success": 0.44},
                                    {"step": 10, "sim/success": 0.47}], "last_step": 10})
    assert not cb.start_due(12)  # resumed after step 10's eval: go on to step 20's
    assert cb.start_due(0)  # a resume from step 0 (its eval not written) scores it
    assert not SimEvalCallback(every_n_steps=10, at_start=False).start_due(0)
