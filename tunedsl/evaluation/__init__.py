"""Scoring an agent through its models, and what is built on the scores: ``eval`` and
``rescore``, picking a model (``eval --model A --model B``) and tuning a prompt."""
