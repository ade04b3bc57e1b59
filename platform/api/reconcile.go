package api

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"

	"github.com/labstack/echo/v4"

	"sluice/platform/store"
	"sluice/platform/usage"
)

// Provider usage reports.
const (
	// reportTimeout bounds one fetch of a provider usage report.
	reportTimeout = 30 * time.Second
	// maxReportBytes bounds a provider usage report's body.
	maxReportBytes = 16 << 20
)

// GetUsageReconciliation compares a provider's metered usage with its usage
// report.
func (s *Server) GetUsageReconciliation(c echo.Context, p GetUsageReconciliationParams) error {
	ctx := c.Request().Context()
	now := s.now()
	to := now
	if p.To != nil {
		to = *p.To
	}
	from := to.Add(-24 * time.Hour)
	if p.From != nil {
		from = *p.From
	}
	from, to = from.UTC(), to.UTC()
	if !from.Before(to) {
		return invalid([]Problem{problem("query.from", "from (%s) must be before to (%s)", from.Format(time.RFC3339Nano), to.Format(time.RFC3339Nano))})
	}
	if r := s.usage.Retention(); r > 0 && from.Before(now.Add(-r)) {
		return invalid([]Problem{problem("query.from", "from (%s) is before the raw records' retention (%s): reconciliation reads the raw records, kept since %s",
			from.Format(time.RFC3339), r, now.Add(-r).UTC().Format(time.RFC3339))})
	}
	var (
		prov    store.Provider
		found   bool
		metered []store.MeteredUsage
	)
	err := s.store.Read(ctx, func(tx store.Tx) error {
		ps, err := tx.ListProviders(ctx)
		if err != nil {
			return err
		}
		for _, x := range ps {
			if x.Name == p.Provider {
				prov, found = x, true
			}
		}
		if !found {
			return nil
		}
		metered, err = tx.MeteredUsage(ctx, prov.Name, from, to)
		return err
	})
	switch {
	case err != nil:
		return err
	case !found:
		return invalid([]Problem{problem("query.provider", "no provider is named %q", p.Provider)})
	case prov.UsageReportURL == "":
		return invalid([]Problem{problem("query.provider", "provider %q has no usageReportUrl: set it (PUT /providers/%s) to the URL of its usage report", prov.Name, prov.ID)})
	}
	report, err := s.fetchReport(ctx, prov.UsageReportURL, from, to)
	if err != nil {
		return newError(http.StatusBadGateway, "usage_report_unavailable", "provider %q: its usage report: %v", prov.Name, err)
	}
	rec := usage.Reconcile(metered, report)
	out := UsageReconciliation{Provider: prov.Name, From: from, To: to, Rows: reconciliationRows(rec.Rows),
		Mismatches: reconciliationRows(rec.Mismatches),
		Totals:     ReconciliationTotals{Metered: reconciled(rec.Metered), Reported: reconciled(rec.Reported), Delta: reconciled(rec.Delta)}}
	return c.JSON(http.StatusOK, out)
}

func reconciled(c usage.Counts) ReconciledUsage {
	return ReconciledUsage{Requests: c.Requests, PromptTokens: c.PromptTokens, CompletionTokens: c.CompletionTokens}
}

func reconciliationRows(rows []usage.ReconciliationRow) []ReconciliationRow {
	out := make([]ReconciliationRow, 0, len(rows))
	for _, r := range rows {
		out = append(out, ReconciliationRow{Application: r.Application, Model: r.Model,
			Metered: reconciled(r.Metered), Reported: reconciled(r.Reported), Delta: reconciled(r.Delta)})
	}
	return out
}

// fetchReport GETs the provider usage report at raw with from and to (RFC
// 3339) added to its query. Errors never show the URL: it may carry a
// credential.
func (s *Server) fetchReport(ctx context.Context, raw string, from, to time.Time) (usage.Report, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return usage.Report{}, errors.New("invalid usageReportUrl")
	}
	q := u.Query()
	q.Set("from", from.Format(time.RFC3339Nano))
	q.Set("to", to.Format(time.RFC3339Nano))
	u.RawQuery = q.Encode()
	ctx, cancel := context.WithTimeout(ctx, reportTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return usage.Report{}, errors.New("invalid usageReportUrl")
	}
	req.Header.Set("Accept", "application/json")
	resp, err := s.httpClient.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return usage.Report{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return usage.Report{}, fmt.Errorf("answered %d, want 200", resp.StatusCode)
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxReportBytes+1))
	if err != nil {
		return usage.Report{}, fmt.Errorf("reading it: %w", err)
	}
	if len(b) > maxReportBytes {
		return usage.Report{}, fmt.Errorf("larger than %d MiB", maxReportBytes>>20)
	}
	return usage.DecodeReport(b)
}
