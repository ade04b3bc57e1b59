package api

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"strings"

	"github.com/labstack/echo/v4"

	"sluice/deployment/yamlfile"
	"sluice/platform/delivery"
	"sluice/platform/generate"
	"sluice/platform/store"
)

func toProvider(p store.Provider) Provider {
	out := Provider{Id: p.ID, Name: p.Name, Type: ProviderType(p.Type), AuthHeader: p.AuthHeader,
		HasApiKey: p.APIKeySealed != nil, CreatedAt: p.CreatedAt, UpdatedAt: p.UpdatedAt}
	if out.AuthHeader == "" {
		out.AuthHeader = delivery.UpstreamAuth(p.Type, "", "").Header
	}
	if p.URL != "" {
		out.Url = ptr(p.URL)
	}
	if len(p.Targets) > 0 {
		out.Targets = ptr(append([]string(nil), p.Targets...))
	}
	if len(p.ForwardHeaders) > 0 {
		out.ForwardHeaders = ptr(append([]string(nil), p.ForwardHeaders...))
	}
	if p.ApplicationHeader != "" {
		out.ApplicationHeader = ptr(p.ApplicationHeader)
	}
	if p.UsageReportURL != "" {
		out.UsageReportUrl = ptr(p.UsageReportURL)
	}
	return out
}

// usageReportURLProblem says what is wrong with s as a usageReportUrl, or
// returns "".
func usageReportURLProblem(s string) string {
	u, err := url.Parse(s)
	switch {
	case err != nil:
		return "invalid URL: " + err.Error()
	case u.Scheme != "http" && u.Scheme != "https":
		return "want an absolute http:// or https:// URL"
	case u.Host == "":
		return "the URL has no host"
	case u.Fragment != "":
		return "the URL must not have a fragment"
	}
	return ""
}

func (s *Server) ListProviders(c echo.Context) error {
	ctx := c.Request().Context()
	out := ProviderList{Providers: []Provider{}}
	err := s.store.Read(ctx, func(tx store.Tx) error {
		ps, err := tx.ListProviders(ctx)
		for _, p := range ps {
			out.Providers = append(out.Providers, toProvider(p))
		}
		return err
	})
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, out)
}

func (s *Server) GetProvider(c echo.Context, id ProviderId) error {
	ctx := c.Request().Context()
	var p store.Provider
	err := s.store.Read(ctx, func(tx store.Tx) (err error) {
		p, err = tx.GetProvider(ctx, id)
		return err
	})
	if err != nil {
		return storeError(err, "provider", id)
	}
	return c.JSON(http.StatusOK, toProvider(p))
}

// applyInput fills p from in. The upstream key is sealed for p.ID; a nil
// apiKey keeps p's, "" removes it.
func (s *Server) applyInput(p *store.Provider, in ProviderInput) error {
	p.Name, p.Type = in.Name, string(in.Type)
	p.URL, p.Targets = "", nil
	if in.Url != nil {
		p.URL = *in.Url
	}
	if in.Targets != nil {
		p.Targets = *in.Targets
	}
	p.AuthHeader = ""
	if in.AuthHeader != nil {
		p.AuthHeader = *in.AuthHeader
	}
	p.ForwardHeaders, p.ApplicationHeader, p.UsageReportURL = nil, "", ""
	if in.ForwardHeaders != nil && len(*in.ForwardHeaders) > 0 {
		p.ForwardHeaders = *in.ForwardHeaders
	}
	if in.ApplicationHeader != nil {
		p.ApplicationHeader = *in.ApplicationHeader
	}
	if in.UsageReportUrl != nil {
		p.UsageReportURL = *in.UsageReportUrl
		if msg := usageReportURLProblem(p.UsageReportURL); msg != "" {
			return invalid([]Problem{problem("$.usageReportUrl", "%s", msg)})
		}
	}
	if in.ApiKey != nil {
		if *in.ApiKey == "" {
			p.APIKeySealed = nil
			return nil
		}
		if strings.ContainsAny(*in.ApiKey, "\r\n") {
			return invalid([]Problem{problem("$.apiKey", "must not contain line breaks")})
		}
		sealed, err := s.box.Seal([]byte(*in.ApiKey), p.ID)
		if err != nil {
			return err
		}
		p.APIKeySealed = sealed
	}
	return nil
}

func (s *Server) CreateProvider(c echo.Context) error {
	ctx := c.Request().Context()
	var in ProviderInput
	if err := bind(c, &in); err != nil {
		return err
	}
	now := s.now()
	p := store.Provider{ID: newID("prv"), CreatedAt: now, UpdatedAt: now}
	if err := s.applyInput(&p, in); err != nil {
		return err
	}
	err := s.write(ctx, func(tx store.Tx) (int64, error) {
		if err := tx.InsertProvider(ctx, p); err != nil {
			return 0, providerConflict(err, p.Name)
		}
		return s.providerChanged(ctx, c, tx, p.ID, "provider.create", nil, ptr(toProvider(p)))
	})
	if err != nil {
		return err
	}
	return c.JSON(http.StatusCreated, toProvider(p))
}

func providerConflict(err error, name string) error {
	if errors.Is(err, store.ErrConflict) {
		return newError(http.StatusConflict, "conflict", "a provider named %q exists", name)
	}
	return storeError(err, "provider", "")
}

// providerChanged checks the provider's route, bumps the version and
// records the change.
func (s *Server) providerChanged(ctx context.Context, c echo.Context, tx store.Tx, id, action string, before, after any) (int64, error) {
	if err := s.checkProvider(ctx, tx, id, providerMapper); err != nil {
		return 0, err
	}
	v, err := tx.BumpVersion(ctx)
	if err != nil {
		return 0, err
	}
	return v, s.audit(ctx, c, tx, action, "provider", id, before, after)
}

func (s *Server) UpdateProvider(c echo.Context, id ProviderId) error {
	ctx := c.Request().Context()
	var in ProviderInput
	if err := bind(c, &in); err != nil {
		return err
	}
	var out store.Provider
	err := s.write(ctx, func(tx store.Tx) (int64, error) {
		p, err := tx.GetProvider(ctx, id)
		if err != nil {
			return 0, storeError(err, "provider", id)
		}
		before := toProvider(p)
		if err := s.applyInput(&p, in); err != nil {
			return 0, err
		}
		p.UpdatedAt = s.now()
		if err := tx.UpdateProvider(ctx, p); err != nil {
			return 0, providerConflict(err, p.Name)
		}
		out = p
		return s.providerChanged(ctx, c, tx, id, "provider.update", before, ptr(toProvider(p)))
	})
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, toProvider(out))
}

func (s *Server) DeleteProvider(c echo.Context, id ProviderId) error {
	ctx := c.Request().Context()
	err := s.write(ctx, func(tx store.Tx) (int64, error) {
		p, err := tx.GetProvider(ctx, id)
		if err != nil {
			return 0, storeError(err, "provider", id)
		}
		if err := tx.DeleteProvider(ctx, id); err != nil {
			return 0, err
		}
		v, err := tx.BumpVersion(ctx)
		if err != nil {
			return 0, err
		}
		return v, s.audit(ctx, c, tx, "provider.delete", "provider", id, toProvider(p), nil)
	})
	if err != nil {
		return err
	}
	return c.NoContent(http.StatusNoContent)
}

func (s *Server) GetProviderDeployment(c echo.Context, id ProviderId) error {
	ctx := c.Request().Context()
	var (
		version  int64
		settings generate.Settings
	)
	err := s.store.Read(ctx, func(tx store.Tx) error {
		if _, err := tx.GetProvider(ctx, id); err != nil {
			return storeError(err, "provider", id)
		}
		var err error
		if version, err = tx.Version(ctx); err != nil {
			return err
		}
		settings, err = delivery.LoadSettings(ctx, tx, delivery.Secrets{Box: s.box, Redact: true}, s.now())
		return err
	})
	if err != nil {
		return err
	}
	var prov generate.Provider
	for _, p := range settings.Providers {
		if p.ID == id {
			prov = p
		}
	}
	// The provider's part: itself and its route (api-key-auth lists the
	// applications granted it; their keys are under /applications), and the
	// counters section every gateway counts its limits in (redacted).
	part := generate.Settings{Providers: []generate.Provider{prov}, Counters: settings.Counters}
	for _, a := range settings.Applications {
		for _, pid := range a.Providers {
			if pid == id {
				part.Applications = append(part.Applications, generate.Application{ID: a.ID, Providers: a.Providers})
			}
		}
	}
	res, err := generate.Generate(part)
	if err != nil {
		return err
	}
	res.Deployment.Applications = nil
	if err != nil {
		return err
	}
	y, err := yamlfile.YAML(res.Deployment)
	if err != nil {
		return err
	}
	route := res.Deployment.Routes[0]
	out := ProviderDeployment{Version: version, Route: route.Name, Context: route.Context, Yaml: string(y), Entries: []DeploymentEntry{}}
	for i, e := range route.Policies {
		o := res.Origins[route.Name][i]
		de := DeploymentEntry{Name: e.Name, Version: e.Version, Origin: Origin{Kind: OriginKind(o.Kind)}}
		if o.Ref != "" {
			de.Origin.Ref = ptr(o.Ref)
		}
		if e.Params != nil {
			de.Params = ptr(e.Params)
		}
		if e.Resources != nil {
			de.Resources = &struct {
				Exclude *[]string `json:"exclude,omitempty"`
				Include *[]string `json:"include,omitempty"`
			}{}
			if len(e.Resources.Include) > 0 {
				de.Resources.Include = ptr(e.Resources.Include)
			}
			if len(e.Resources.Exclude) > 0 {
				de.Resources.Exclude = ptr(e.Resources.Exclude)
			}
		}
		out.Entries = append(out.Entries, de)
	}
	return c.JSON(http.StatusOK, out)
}
