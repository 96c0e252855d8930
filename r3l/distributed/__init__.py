"""Scale-out: rollout workers as Ray actors (rollout_pool.py, rollout_worker.py) and the pure pieces they share
(sharding.py). Nothing here is imported unless the config's `distributed` section asks for it."""
