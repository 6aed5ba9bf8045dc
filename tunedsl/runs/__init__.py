"""Run directories and every file a command writes: their names, the one writer, where an
output may go, and how an interrupt ends a command so that what it saves is whole."""
