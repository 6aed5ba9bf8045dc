"""`ChatModel` implementations tunedsl provides: an OpenAI-compatible endpoint, a
scripted model for tests and preflights, and the in-process server that gives any
recording model a real ``openai.AsyncOpenAI`` client."""
