"""Who gets which GPUs when: the queue, the scheduler pass and its fair order, placement, quotas and
limits, preemption, dispatch, usage and GPU-hour accounting."""
