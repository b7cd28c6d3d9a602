"""Shape errors outside products: kept shapes do not fit other annotations."""

from typing import Literal

import tgrad
from tgrad import Tensor

Batch = Literal[32]
Model = Literal[768]
Hidden = Literal[512]


def kept_shape(x: Tensor[Batch, Model]) -> Tensor[Batch, Hidden]:
    return (x + 1).relu()  # expect-error: mypy[return-value] pyright[reportReturnType]


def stated_wrongly(raw: Tensor) -> None:
    x: Tensor[Batch, Model] = tgrad.typed(raw, 32, 512)  # expect-error: mypy[arg-type] pyright[reportAssignmentType]
    print(x)


def transposed_twice(w: Tensor[Hidden, Model]) -> Tensor[Model, Hidden]:
    return w.T.T  # expect-error: mypy[arg-type] pyright[reportReturnType]
