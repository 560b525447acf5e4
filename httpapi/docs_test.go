package httpapi

import (
	"context"
	"io"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
)

// notDocumented lists the routes that are not API and so are not in the document:
// the documentation itself and the redirects to it, and the methods login and
// refresh refuse other than GET (whose operation says so for all).
var notDocumented = []string{
	"PUT /api/auth/login",
	"DELETE /api/auth/login",
	"PATCH /api/auth/login",
	"PUT /api/auth/token",
	"DELETE /api/auth/token",
	"PATCH /api/auth/token",
	"GET /",
	"GET /v3/api-docs",
	"GET /v3/api-docs.yaml",
	"GET /swagger-ui/",
	"GET /swagger-ui.html",
	"GET /swagger-ui/{}",
}

// loadAPIDoc parses and validates the served document (examples included).
func loadAPIDoc(t *testing.T) *openapi3.T {
	t.Helper()
	raw, err := apiDocJSON()
	if err != nil {
		t.Fatal(err)
	}
	doc, err := openapi3.NewLoader().LoadFromData(raw)
	if err != nil {
		t.Fatalf("parse: %v", err)
	}
	if err := doc.Validate(context.Background(), openapi3.EnableExamplesValidation()); err != nil {
		t.Fatalf("invalid OpenAPI document: %v", err)
	}
	return doc
}

func TestAPIDocValid(t *testing.T) {
	doc := loadAPIDoc(t)
	if doc.OpenAPIMajorMinor() != "3.1" {
		t.Fatalf("openapi %q, want 3.1", doc.OpenAPI)
	}
	if e := doc.Components.Schemas["ErrorResponse"]; e == nil ||
		!slices.Equal(e.Value.Required, []string{"status", "message", "errorCode", "timestamp"}) {
		t.Fatal("ErrorResponse schema is missing or incomplete")
	}
	login := doc.Components.SecuritySchemes["HttpLoginForm"].Value
	if login.Type != "http" || login.Scheme != "loginPassword" || login.Extensions["x-login-endpoint"] != "/api/auth/login" {
		t.Fatalf("HttpLoginForm: %+v", login)
	}
	key := doc.Components.SecuritySchemes["ApiKeyForm"].Value
	if key.Type != "apiKey" || key.In != "header" || key.Name != "X-Authorization" || !strings.Contains(key.Description, "HTTPS only") {
		t.Fatalf("ApiKeyForm: %+v", key)
	}
	for path, item := range doc.Paths.Map() {
		for method, op := range item.Operations() {
			if op.OperationID == "" || len(op.Tags) == 0 {
				t.Errorf("%s %s: operationId and a tag are required", method, path)
			}
			if op.Responses.Value("200") == nil && op.Responses.Value("401") == nil {
				t.Errorf("%s %s: no 200 response", method, path)
			}
		}
	}
}

// routeKey normalises "GET /api/device/{deviceId}" to "GET /api/device/{}", so
// parameter names may differ between router and document.
var paramName = regexp.MustCompile(`\{[^}]*\}`)

func routeKey(method, path string) string {
	return method + " " + paramName.ReplaceAllString(path, "{}")
}

// TestAPIDocCoversRoutes fails for every route the router serves that the document
// does not describe (a new route needs its documentation in openapi/openapi.yaml),
// and for every documented operation no route serves.
func TestAPIDocCoversRoutes(t *testing.T) {
	doc := loadAPIDoc(t)
	documented := make(map[string]bool)
	for path, item := range doc.Paths.Map() {
		for method := range item.Operations() {
			documented[routeKey(method, path)] = false
		}
	}
	s := New(Config{}, nil, nil, nil, nil)
	for method, paths := range s.routes().List() {
		for _, path := range paths {
			k := routeKey(method, path)
			if slices.Contains(notDocumented, k) {
				continue
			}
			if _, ok := documented[k]; !ok {
				t.Errorf("route %s %s is not in httpapi/openapi/openapi.yaml", method, path)
				continue
			}
			documented[k] = true
		}
	}
	var ahead []string
	for k, served := range documented {
		if !served {
			ahead = append(ahead, k)
		}
	}
	slices.Sort(ahead)
	if len(ahead) > 0 {
		t.Errorf("documented, not served (%d): %s", len(ahead), strings.Join(ahead, ", "))
	}
}

// TestAPIDocSecurity checks where credentials are required: /api/** except the
// device API, /api/noauth/**, login and refresh (ThingsBoard's rule), and the
// report API.
func TestAPIDocSecurity(t *testing.T) {
	doc := loadAPIDoc(t)
	public := regexp.MustCompile(`^(/api/v1/|/api/noauth/|/api/auth/login$|/api/auth/token$|/healthz$|/metrics$)`)
	for path, item := range doc.Paths.Map() {
		for method, op := range item.Operations() {
			sec := doc.Security
			if op.Security != nil {
				sec = *op.Security
			}
			var schemes []string
			for _, req := range sec {
				for name := range req {
					schemes = append(schemes, name)
				}
			}
			switch {
			case public.MatchString(path):
				if len(schemes) != 0 {
					t.Errorf("%s %s is public but documents security %v", method, path, schemes)
				}
			case !slices.Contains(schemes, "HttpLoginForm") || !slices.Contains(schemes, "ApiKeyForm"):
				t.Errorf("%s %s: security %v, want HttpLoginForm and ApiKeyForm", method, path, schemes)
			}
		}
	}
}

func TestDocsRoutes(t *testing.T) {
	n := startTestNode(t)
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	get := func(path string, header ...string) (*http.Response, string) {
		t.Helper()
		req, err := http.NewRequest("GET", n.URL+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i+1 < len(header); i += 2 {
			req.Header.Set(header[i], header[i+1])
		}
		resp, err := noRedirect.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return resp, string(b)
	}

	redirects := func(path string) {
		t.Helper()
		resp, _ := get(path)
		if resp.StatusCode != http.StatusFound || resp.Header.Get("Location") != docsPage {
			t.Fatalf("GET %s: %d Location %q", path, resp.StatusCode, resp.Header.Get("Location"))
		}
	}
	redirects("/")
	redirects("/swagger-ui.html")
	redirects("/swagger-ui/")

	serves := func(path, contentType, contains string) {
		t.Helper()
		resp, body := get(path)
		if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), contentType) ||
			!strings.Contains(body, contains) {
			t.Fatalf("GET %s: %d %s, body has %q: %v", path, resp.StatusCode, resp.Header.Get("Content-Type"),
				contains, strings.Contains(body, contains))
		}
	}
	serves("/v3/api-docs", "application/json", `{"openapi":"3.1.0","info":{`) // source order kept
	serves("/v3/api-docs", "application/json", `"targetTemperature":22.0`)    // a double stays one
	serves("/v3/api-docs.yaml", "application/yaml", "openapi: 3.1.0")
	serves(docsPage, "text/html", `src="./sluice-swagger.js"`)
	serves("/swagger-ui/sluice-swagger.js", "text/javascript", "requestInterceptor")
	serves("/swagger-ui/swagger-ui-bundle.js", "text/javascript", "SwaggerUIBundle")
	serves("/swagger-ui/swagger-ui-standalone-preset.js", "text/javascript", "SwaggerUIStandalonePreset")
	serves("/swagger-ui/swagger-ui.css", "text/css", ".swagger-ui")
	serves("/swagger-ui/favicon-32x32.png", "image/png", "PNG")

	// The page works with no internet: nothing is loaded from another host.
	page, index := get(docsPage)
	if page.Header.Get("X-Frame-Options") != "DENY" || page.Header.Get("Content-Security-Policy") != "frame-ancestors 'none'" {
		t.Fatalf("the page may be framed: %v", page.Header)
	}
	if m := regexp.MustCompile(`(src|href)="(https?:)?//`).FindString(index); m != "" {
		t.Fatalf("index.html loads from another host: %s", m)
	}

	resp, _ := get("/swagger-ui/swagger-ui.css", "Accept-Encoding", "gzip")
	if resp.Header.Get("Content-Encoding") != "gzip" || resp.Header.Get("ETag") == "" {
		t.Fatalf("css: Content-Encoding %q ETag %q", resp.Header.Get("Content-Encoding"), resp.Header.Get("ETag"))
	}
	if again, _ := get("/swagger-ui/swagger-ui.css", "If-None-Match", resp.Header.Get("ETag")); again.StatusCode != http.StatusNotModified {
		t.Fatalf("css with If-None-Match: %d, want 304", again.StatusCode)
	}
	n.expect("GET", "/swagger-ui/nope.js", "", nil, http.StatusNotFound, "Path not found: /swagger-ui/nope.js")
}
