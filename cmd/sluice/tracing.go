package main

import (
	"os"

	"sluice/internal/app"
)

// tracingFromEnv turns OpenTelemetry traces on when OTEL_TRACES_EXPORTER is
// otlp (docs/observability.md); the exporter reads OTEL_EXPORTER_OTLP_*.
func tracingFromEnv() app.TracingOptions {
	return app.TracingOptions{Enabled: os.Getenv("OTEL_TRACES_EXPORTER") == "otlp", Version: buildVersion()}
}
