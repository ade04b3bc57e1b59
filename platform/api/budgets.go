package api

import (
	"errors"
	"net/http"

	"github.com/labstack/echo/v4"

	"sluice/platform/budgets"
)

func (s *Server) GetApplicationBudgets(c echo.Context, id ApplicationId, params GetApplicationBudgetsParams) error {
	provider := ""
	if params.Provider != nil {
		provider = *params.Provider
	}
	rep, err := s.budgets.Application(c.Request().Context(), id, provider)
	if errors.Is(err, budgets.ErrUnknownApplication) {
		return newError(http.StatusNotFound, "not_found", "application %q does not exist", id)
	}
	if err != nil {
		return err
	}
	out := ApplicationBudgets{ApplicationId: id, Available: rep.Available, Reason: rep.Reason, Budgets: []Budget{}}
	for i := range rep.Lines {
		out.Budgets = append(out.Budgets, toBudget(&rep.Lines[i]))
	}
	c.Response().Header().Set("Cache-Control", "no-store")
	return c.JSON(http.StatusOK, out)
}

func toBudget(l *budgets.Line) Budget {
	b := Budget{
		Provider: l.Provider, Route: l.Route, Policy: l.Policy, Entry: ptr(l.Entry), Origin: l.Origin,
		Scope: BudgetScope(l.Scope), Resource: l.Resource, Dimension: BudgetDimension(l.Dimension), Counter: ptr(l.Counter),
		Period: l.Period, Unit: BudgetUnit(l.Unit), Limit: budgets.Amount(l.Unit, l.Limit), Remaining: budgets.Amount(l.Unit, l.Remaining),
		UsedPercent: l.UsedPercent(), ResetsAt: l.ResetsAt(),
	}
	if len(l.AlertAt) > 0 {
		b.AlertAt = ptr(append([]int(nil), l.AlertAt...))
	}
	return b
}
