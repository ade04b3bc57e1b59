package policies

import (
	"errors"

	sjs "github.com/santhosh-tekuri/jsonschema/v6"
)

func asValidationError(err error, target **sjs.ValidationError) bool { return errors.As(err, target) }
func asParamErrors(err error, target *ParamErrors) bool              { return errors.As(err, target) }
func asParamError(err error, target **ParamError) bool               { return errors.As(err, target) }
