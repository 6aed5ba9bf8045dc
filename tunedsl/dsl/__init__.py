"""The DSL users write: decorators, setting records, outputs and the chat-model protocol.

Pure declarations: nothing here reads files, starts work or imports a heavy library.
"""
