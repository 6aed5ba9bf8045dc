"""Trinity-RFT's Sudoku workflow (``trinity/common/workflows/envs/sudoku``), ported.

    python -m tunedsl check examples.sudoku.experiment:Sudoku
    python -m tunedsl run examples.sudoku.experiment:Sudoku --backend trinity   # GPUs

Trinity's ``SudokuWorkflow`` is a class whose ``run`` calls ``self.model.chat`` once a step
and returns one ``Experience`` per step with that step's own reward (-1 for a move that
breaks the rules or changes nothing, 1 for the move that solves the puzzle, 0 between).
Here the same game is a ``@workflow`` function: each step ends with
``model.end_turn(reward=..., state=board)``, so the step rewards reach ``gigpo`` as they
did (``info["step_reward"]``, one experience per call), and the rollout's reward (solved
or not) is what eval and the other algorithms read. The board, the prompt and the rules
are Trinity's; the puzzles in ``data/`` are made from one valid grid, its digits relabelled
and a few cells emptied.
"""

from __future__ import annotations

from tunedsl import Algorithm, Dataset, Model, WorkflowOutput, experiment, workflow

MAX_STEPS = 20
MAX_MOVES_PER_STEP = 5


def render(board: list[list[int]]) -> str:
    """The board as Trinity renders it: one row a line, 0 for an empty cell."""
    return "\n".join(" ".join(str(v) for v in row) for row in board)


def prompt(board: list[list[int]], step: int, stuck: bool) -> str:
    """Trinity's step prompt: the rules, the move format, the step and the board."""
    text = (
        "You are playing a Sudoku game.\n\n"
        "Rules:\n"
        "- The board is 9x9.\n"
        "- 0 means empty.\n"
        "- Numbers 1–9 must appear exactly once in every row, column, and 3x3 block.\n"
        "- You may only fill empty cells.\n\n"
        "Task:\n"
        "- In each step, output ONE OR MORE valid moves.\n"
        f"- You may output up to {MAX_MOVES_PER_STEP} moves per step.\n\n"
        "Output format (STRICT):\n"
        "row col value\n"
        "row col value\n\n"
        "Example:\n"
        "0 2 4\n"
        "1 3 5\n\n"
        f"Current step: {step}\n"
        f"Remaining steps: {MAX_STEPS - step}\n\n"
        f"Current board:\n{render(board)}\n"
    )
    if stuck:
        text += ("\nYour previous response was invalid or had no effect. "
                 "Please follow the rules and output format strictly.")
    return text


def parse_moves(text: str) -> list[tuple[int, int, int]] | None:
    """``row col value`` lines, 1 to `MAX_MOVES_PER_STEP` of them, or None."""
    moves = []
    for line in text.strip().splitlines():
        parts = line.split()
        if not parts:
            continue
        if len(parts) != 3 or not all(part.lstrip("-").isdigit() for part in parts):
            return None
        row, col, value = map(int, parts)
        if not (0 <= row <= 8 and 0 <= col <= 8 and 1 <= value <= 9):
            return None
        moves.append((row, col, value))
    return moves if 0 < len(moves) <= MAX_MOVES_PER_STEP else None


def is_valid(board: list[list[int]]) -> bool:
    """No digit twice in a row, a column or a 3x3 block (empty cells aside)."""
    groups = [board[r] for r in range(9)]
    groups += [[board[r][c] for r in range(9)] for c in range(9)]
    groups += [[board[r][c] for r in range(br, br + 3) for c in range(bc, bc + 3)]
               for br in (0, 3, 6) for bc in (0, 3, 6)]
    return all(len(filled) == len(set(filled))
               for filled in ([v for v in group if v] for group in groups))


@workflow
async def solve(task, model):
    """Up to `MAX_STEPS` steps, one call each, as Trinity's ``SudokuWorkflow.run``."""
    board = [row[:] for row in task["puzzle"]]
    stuck, reward = False, 0.0
    for step in range(MAX_STEPS):
        before = render(board)
        reply = await model.chat([{"role": "user", "content": prompt(board, step, stuck)}])
        moves = parse_moves(reply.content)
        changed = False
        if moves is not None:
            for row, col, value in moves:
                if board[row][col] != 0:
                    moves = None  # a filled cell: the step breaks the rules
                    break
                board[row][col], changed = value, True
        if moves is None or not changed or not is_valid(board):
            reward = -1.0
            model.end_turn(reward=reward, state=before)
            break
        if board == task["solution"]:
            reward = 1.0
            model.end_turn(reward=reward, state=before)
            break
        model.end_turn(reward=0.0, state=before)
        stuck = render(board) == before
    return WorkflowOutput(response=render(board), reward=max(reward, 0.0),
                          metrics={"filled": float(sum(v != 0 for row in board for v in row))})


@experiment
class Sudoku:
    """GiGPO over the steps of a game, as Trinity's multi-step workflows are trained."""

    workflow = solve
    train_dataset = Dataset("data", split="train")
    eval_dataset = Dataset("data", split="test")
    model = Model("Qwen/Qwen3-0.6B", max_model_len=4096, max_tokens=256)
    algorithm = Algorithm("gigpo", group_size=8, batch_size=8, learning_rate=1e-6)
