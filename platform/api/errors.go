package api

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sort"

	"github.com/labstack/echo/v4"

	"sluice/platform/store"
)

// apiError is the one error type handlers return; errorHandler renders it
// as the Error schema. Nothing else writes error bodies.
type apiError struct {
	status  int
	code    string
	message string
	details []Problem
}

func (e *apiError) Error() string { return fmt.Sprintf("%d %s: %s", e.status, e.code, e.message) }

func newError(status int, code, format string, args ...any) *apiError {
	return &apiError{status: status, code: code, message: fmt.Sprintf(format, args...)}
}

func notFound(what, id string) *apiError {
	return newError(http.StatusNotFound, "not_found", "%s %q does not exist", what, id)
}

// invalid is a 422 listing problems, sorted by path.
func invalid(problems []Problem) *apiError {
	sort.SliceStable(problems, func(i, j int) bool { return problems[i].Path < problems[j].Path })
	msg := "the request is invalid"
	if len(problems) > 0 {
		msg = problems[0].Path + ": " + problems[0].Message
		if len(problems) > 1 {
			msg += fmt.Sprintf(" (and %d more problems)", len(problems)-1)
		}
	}
	return &apiError{status: http.StatusUnprocessableEntity, code: "validation_failed", message: msg, details: problems}
}

func problem(path, format string, args ...any) Problem {
	return Problem{Path: path, Message: fmt.Sprintf(format, args...)}
}

var (
	errUnauthorized = newError(http.StatusUnauthorized, "unauthorized",
		"send a valid token: Authorization: Bearer <token>")
	errPreconditionRequired = newError(http.StatusPreconditionRequired, "precondition_required",
		"send If-Match with the ETag of what you are replacing (GET it first), or If-Match: * to replace whatever is there")
	errStale = newError(http.StatusPreconditionFailed, "precondition_failed",
		"If-Match does not match the current ETag: someone else changed it; GET it again and reapply your change")
)

// storeError maps store errors to API errors; what and id name the resource.
func storeError(err error, what, id string) error {
	var ae *apiError
	switch {
	case errors.As(err, &ae):
		return ae
	case errors.Is(err, store.ErrNotFound):
		return notFound(what, id)
	case errors.Is(err, store.ErrStale):
		return errStale
	case errors.Is(err, store.ErrConflict):
		return newError(http.StatusConflict, "conflict", "%s: a unique value is already taken", what)
	}
	return err
}

// errorHandler renders every error a handler or middleware returns. Internal
// errors are logged (never with request bodies) and answered without detail.
func errorHandler(log *slog.Logger) echo.HTTPErrorHandler {
	return func(err error, c echo.Context) {
		if c.Response().Committed {
			return
		}
		var ae *apiError
		var he *echo.HTTPError
		switch {
		case errors.As(err, &ae):
		case errors.As(err, &he):
			code := "bad_request"
			switch he.Code {
			case http.StatusNotFound:
				code = "not_found"
			case http.StatusMethodNotAllowed:
				code = "method_not_allowed"
			case http.StatusRequestEntityTooLarge:
				code = "request_too_large"
			}
			ae = newError(he.Code, code, "%v", he.Message)
		default:
			log.Error("platform API request failed", "method", c.Request().Method, "path", c.Path(), "error", err)
			ae = newError(http.StatusInternalServerError, "internal", "internal error")
		}
		var body Error
		body.Error.Code, body.Error.Message = ae.code, ae.message
		if len(ae.details) > 0 {
			d := ae.details
			body.Error.Details = &d
		}
		_ = c.JSON(ae.status, body)
	}
}
