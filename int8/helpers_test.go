package int8_test

import (
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/shapes"
)

func shapesF32(dims ...int) shapes.Shape { return shapes.Make(dtypes.Float32, dims...) }
