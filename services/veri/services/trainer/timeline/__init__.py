"""A step's timeline: where its wall time went (rollouts, model calls, trainer, sync, idle) and the
utilisation figures that go into its metrics line (`recorder.StepTimeline`, `record.step_timeline`)."""
