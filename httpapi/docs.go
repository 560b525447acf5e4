package httpapi

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"path"
	"sync"

	"github.com/fasthttp/router"
	"github.com/valyala/fasthttp"
	"gopkg.in/yaml.v3"

	"github.com/sluice-iot/sluice/engine"
	"github.com/sluice-iot/sluice/kv"
)

// docsPage is the interactive API documentation page (ThingsBoard's path).
const docsPage = "/swagger-ui/index.html"

// openapiYAML is the OpenAPI document, written by hand next to the handlers it
// describes; a test checks it against the router.
//
//go:embed openapi/openapi.yaml
var openapiYAML []byte

// docsFiles is the documentation page: ours (index.html, sluice-swagger.js) and
// the vendored Swagger UI distribution (openapi/ui/README.md names the version).
//
//go:embed openapi/index.html openapi/sluice-swagger.js
//go:embed openapi/ui/swagger-ui-bundle.js openapi/ui/swagger-ui-standalone-preset.js openapi/ui/swagger-ui.css
//go:embed openapi/ui/favicon-16x16.png openapi/ui/favicon-32x32.png
var docsFiles embed.FS

// docsRoutes registers the OpenAPI document (/v3/api-docs), the page that shows
// it (/swagger-ui/index.html) and the redirects to that page. All are public.
func (s *Server) docsRoutes(r *router.Router) {
	r.GET("/v3/api-docs", s.apiDocs)
	r.GET("/v3/api-docs.yaml", s.apiDocsYAML)
	r.GET("/", redirect(docsPage))
	r.GET("/swagger-ui.html", redirect(docsPage))
	r.GET("/swagger-ui/", redirect(docsPage))
	r.GET("/swagger-ui/{file}", s.docsAsset)
}

// apiDocJSON is the OpenAPI document as JSON, converted from the YAML source once.
// The conversion keeps the order of the source, which the page shows.
var apiDocJSON = sync.OnceValues(func() ([]byte, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(openapiYAML, &doc); err != nil {
		return nil, fmt.Errorf("cannot parse the OpenAPI document: %w", err)
	}
	b, err := appendYAMLAsJSON(nil, &doc)
	if err != nil {
		return nil, fmt.Errorf("cannot encode the OpenAPI document as JSON: %w", err)
	}
	return b, nil
})

// appendYAMLAsJSON appends the JSON form of n, with mapping keys in source order.
func appendYAMLAsJSON(buf []byte, n *yaml.Node) ([]byte, error) {
	var err error
	switch n.Kind {
	case yaml.DocumentNode:
		return appendYAMLAsJSON(buf, n.Content[0])
	case yaml.AliasNode:
		return appendYAMLAsJSON(buf, n.Alias)
	case yaml.MappingNode:
		buf = append(buf, '{')
		for i := 0; i+1 < len(n.Content); i += 2 {
			if i > 0 {
				buf = append(buf, ',')
			}
			buf = kv.AppendJSONString(buf, n.Content[i].Value)
			buf = append(buf, ':')
			if buf, err = appendYAMLAsJSON(buf, n.Content[i+1]); err != nil {
				return nil, err
			}
		}
		return append(buf, '}'), nil
	case yaml.SequenceNode:
		buf = append(buf, '[')
		for i, c := range n.Content {
			if i > 0 {
				buf = append(buf, ',')
			}
			if buf, err = appendYAMLAsJSON(buf, c); err != nil {
				return nil, err
			}
		}
		return append(buf, ']'), nil
	}
	if n.Tag == "!!float" && json.Valid([]byte(n.Value)) {
		// As written: decoded, 22.0 would go out as 22, and in this API a
		// number with a point is a double and one without a long.
		return append(buf, n.Value...), nil
	}
	var v any
	if err := n.Decode(&v); err != nil {
		return nil, fmt.Errorf("line %d: %w", n.Line, err)
	}
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("line %d: %w", n.Line, err)
	}
	return append(buf, b...), nil
}

func (s *Server) apiDocs(ctx *fasthttp.RequestCtx) {
	b, err := apiDocJSON()
	if err != nil {
		s.fail(ctx, err)
		return
	}
	ctx.Response.Header.Set("Cache-Control", "no-cache")
	ctx.SetContentType("application/json")
	ctx.SetBody(b)
}

func (s *Server) apiDocsYAML(ctx *fasthttp.RequestCtx) {
	ctx.Response.Header.Set("Cache-Control", "no-cache")
	ctx.SetContentType("application/yaml")
	ctx.SetBody(openapiYAML)
}

// redirect answers 302 to a path on this host. The Location is relative, so it
// stays right behind a proxy that terminates TLS.
func redirect(to string) fasthttp.RequestHandler {
	return func(ctx *fasthttp.RequestCtx) {
		ctx.Response.Header.Set("Location", to)
		ctx.SetStatusCode(fasthttp.StatusFound)
	}
}

// docsAsset is one file of the page, with its gzip form and entity tag.
type docsAsset struct {
	contentType string
	body, gz    []byte
	etag        string
}

// docsAssets maps a file name under /swagger-ui/ to the file, built on first use:
// the page is rarely opened, so no node pays for compressing it at start-up.
var docsAssets = sync.OnceValues(func() (map[string]*docsAsset, error) {
	types := map[string]string{
		".html": "text/html; charset=utf-8",
		".js":   "text/javascript; charset=utf-8",
		".css":  "text/css; charset=utf-8",
		".png":  "image/png",
	}
	assets := make(map[string]*docsAsset)
	for _, name := range []string{
		"openapi/index.html", "openapi/sluice-swagger.js",
		"openapi/ui/swagger-ui-bundle.js", "openapi/ui/swagger-ui-standalone-preset.js", "openapi/ui/swagger-ui.css",
		"openapi/ui/favicon-16x16.png", "openapi/ui/favicon-32x32.png",
	} {
		body, err := docsFiles.ReadFile(name)
		if err != nil {
			return nil, fmt.Errorf("cannot read embedded %s: %w", name, err)
		}
		var gz bytes.Buffer
		zw := gzip.NewWriter(&gz)
		if _, err := zw.Write(body); err != nil {
			return nil, fmt.Errorf("cannot compress %s: %w", name, err)
		}
		if err := zw.Close(); err != nil {
			return nil, fmt.Errorf("cannot compress %s: %w", name, err)
		}
		sum := sha256.Sum256(body)
		assets[path.Base(name)] = &docsAsset{
			contentType: types[path.Ext(name)],
			body:        body,
			gz:          gz.Bytes(),
			etag:        `"` + hex.EncodeToString(sum[:12]) + `"`,
		}
	}
	return assets, nil
})

// docsAsset serves a file of the page, gzip-compressed when the client takes it.
// Clients revalidate every time (no-cache) and get 304 while the file is unchanged,
// so a new binary never leaves a stale page behind.
func (s *Server) docsAsset(ctx *fasthttp.RequestCtx) {
	assets, err := docsAssets()
	if err != nil {
		s.fail(ctx, err)
		return
	}
	a, ok := assets[pathParam(ctx, "file")]
	if !ok {
		writeError(ctx, fasthttp.StatusNotFound, engine.CodeItemNotFound, "Path not found: "+string(ctx.Path()))
		return
	}
	h := &ctx.Response.Header
	h.Set("Cache-Control", "no-cache")
	// No framing by other sites: the page authorizes itself with the main
	// UI's token, so a page that frames it could click calls through it.
	h.Set("X-Frame-Options", "DENY")
	h.Set("Content-Security-Policy", "frame-ancestors 'none'")
	h.Set("ETag", a.etag)
	h.Set("Vary", "Accept-Encoding")
	if string(ctx.Request.Header.Peek("If-None-Match")) == a.etag {
		ctx.SetStatusCode(fasthttp.StatusNotModified)
		return
	}
	ctx.SetContentType(a.contentType)
	if ctx.Request.Header.HasAcceptEncoding("gzip") {
		h.Set("Content-Encoding", "gzip")
		ctx.SetBody(a.gz)
		return
	}
	ctx.SetBody(a.body)
}
