"""A Trinity run directory read without Trinity: its ``config.yaml`` and the experiences
its explorer saved, for ``tunedsl view`` and for resuming (the Trinity backend writes them;
reading them needs no Trinity, so the viewer never imports a backend)."""
