package httpapi

import (
	"bytes"
	"encoding/base64"
	"errors"
	"io"
	"mime"
	"mime/multipart"
	"strconv"
	"strings"

	"github.com/bytedance/sonic"
	"github.com/fasthttp/router"
	"github.com/google/uuid"
	"github.com/valyala/fasthttp"

	"github.com/sluice-iot/sluice/engine"
)

// otaRoutes registers OTA packages and the device firmware/software download (compat §5, §1.10).
func (s *Server) otaRoutes(r *router.Router) {
	r.POST("/api/otaPackage", s.authed(s.saveOtaPackageInfo))
	r.POST("/api/otaPackage/{otaPackageId}", s.authed(s.saveOtaPackageData))
	r.GET("/api/otaPackage/info/{otaPackageId}", s.authed(s.getOtaPackageInfo))
	r.GET("/api/otaPackage/{otaPackageId}", s.authed(s.getOtaPackage))
	r.GET("/api/otaPackage/{otaPackageId}/download", s.authed(s.downloadOtaPackage))
	r.DELETE("/api/otaPackage/{otaPackageId}", s.authed(s.deleteOtaPackage))
	r.GET("/api/otaPackages", s.authed(s.otaPackages))
	r.GET("/api/otaPackages/{deviceProfileId}/{type}", s.authed(s.profileOtaPackages))
	r.GET("/api/v1/{token}/firmware", s.deviceOta(engine.OtaFirmware))
	r.GET("/api/v1/{token}/software", s.deviceOta(engine.OtaSoftware))
}

func (s *Server) saveOtaPackageInfo(ctx *fasthttp.RequestCtx, p *engine.Principal) {
	var in engine.SaveOtaPackageInfoRequest
	if s.readJSON(ctx, &in) {
		v, err := s.eng.SaveOtaPackageInfo(s.ctx, p, &in)
		s.respond(ctx, v, err)
	}
}

// saveOtaPackageData takes the multipart part "file". The body is read as
// every other one (withBody: a Content-Encoding is decompressed within
// SLUICE_MAX_BODY_SIZE) and the part is streamed from it to the engine, which
// stores it in chunks: fasthttp's own form parsing decompressed without a limit
// and copied the file once more.
func (s *Server) saveOtaPackageData(ctx *fasthttp.RequestCtx, p *engine.Principal) {
	id, ok := s.pathID(ctx, "otaPackageId")
	if !ok {
		return
	}
	algorithm, ok := requiredParam(ctx, "checksumAlgorithm")
	if !ok {
		return
	}
	s.withBody(ctx, s.maxBodySize(), func(body []byte) {
		part, err := filePart(ctx, body)
		if err != nil {
			s.fail(ctx, err)
			return
		}
		v, err := s.eng.SaveOtaPackageData(s.ctx, p, id, engine.OtaUpload{
			ChecksumAlgorithm: algorithm,
			Checksum:          string(ctx.QueryArgs().Peek("checksum")),
			FileName:          part.FileName(),
			ContentType:       part.Header.Get("Content-Type"),
			Data:              partReader{part},
		})
		s.respond(ctx, v, err)
	})
}

var errNoFilePart = &engine.Error{Code: engine.CodeBadRequestParams, Msg: "Required part 'file' is not present."}

// filePart finds the part named "file" of a multipart/form-data body.
func filePart(ctx *fasthttp.RequestCtx, body []byte) (*multipart.Part, error) {
	typ, params, err := mime.ParseMediaType(string(ctx.Request.Header.ContentType()))
	if err != nil || !strings.EqualFold(typ, "multipart/form-data") || params["boundary"] == "" {
		return nil, errNoFilePart
	}
	r := multipart.NewReader(bytes.NewReader(body), params["boundary"])
	for {
		part, err := r.NextPart()
		if errors.Is(err, io.EOF) {
			return nil, errNoFilePart
		}
		if err != nil {
			return nil, &corruptBodyError{"Invalid multipart body: " + err.Error()}
		}
		if part.FormName() == "file" {
			return part, nil
		}
	}
}

// partReader reads a multipart part, a body that ends before the part's
// closing boundary being a 400 rather than the end of the file.
type partReader struct{ p *multipart.Part }

func (r partReader) Read(b []byte) (int, error) {
	n, err := r.p.Read(b)
	if err != nil && !errors.Is(err, io.EOF) {
		err = &corruptBodyError{"Invalid multipart body: " + err.Error()}
	}
	return n, err
}

func (s *Server) getOtaPackageInfo(ctx *fasthttp.RequestCtx, p *engine.Principal) {
	if id, ok := s.pathID(ctx, "otaPackageId"); ok {
		v, err := s.eng.GetOtaPackageInfo(s.ctx, p, id)
		s.respond(ctx, v, err)
	}
}

// getOtaPackage answers the package info with its bytes as "data", base64
// (ThingsBoard's OtaPackage, whose ByteBuffer Jackson writes so), null for a
// URL package or one without data. The bytes are streamed, a stored chunk at a
// time, not held whole.
func (s *Server) getOtaPackage(ctx *fasthttp.RequestCtx, p *engine.Principal) {
	id, ok := s.pathID(ctx, "otaPackageId")
	if !ok {
		return
	}
	info, d, err := s.eng.GetOtaPackage(s.ctx, p, id)
	if err != nil {
		s.fail(ctx, err)
		return
	}
	head, err := sonic.Marshal(info)
	if err != nil {
		s.fail(ctx, err)
		return
	}
	head = append(head[:len(head)-1], `,"data":`...) // the info is an object: '}' ends it
	ctx.SetContentType("application/json")
	if d == nil {
		ctx.SetBody(append(head, "null}"...))
		return
	}
	head = append(head, '"')
	n := len(head) + base64.StdEncoding.EncodedLen(int(d.Size)) + len(`"}`)
	ctx.SetBodyStream(io.MultiReader(bytes.NewReader(head), base64Reader(d.Reader(s.ctx, 0, d.Size)), strings.NewReader(`"}`)), n)
}

// base64Reader reads r encoded as standard base64, 3 KiB of r at a time.
func base64Reader(r io.Reader) io.Reader { return &b64Reader{r: r} }

type b64Reader struct {
	r    io.Reader
	in   [3 << 10]byte // a multiple of 3: only the last block is padded
	out  []byte
	done bool
}

func (b *b64Reader) Read(p []byte) (int, error) {
	for len(b.out) == 0 {
		if b.done {
			return 0, io.EOF
		}
		n, err := io.ReadFull(b.r, b.in[:])
		switch {
		case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF):
			b.done = true
		case err != nil:
			return 0, err
		}
		b.out = base64.StdEncoding.AppendEncode(b.out[:0], b.in[:n])
	}
	n := copy(p, b.out)
	b.out = b.out[n:]
	return n, nil
}

func (s *Server) downloadOtaPackage(ctx *fasthttp.RequestCtx, p *engine.Principal) {
	if id, ok := s.pathID(ctx, "otaPackageId"); ok {
		d, err := s.eng.DownloadOtaPackage(s.ctx, p, id)
		if err != nil {
			s.fail(ctx, err)
			return
		}
		s.sendOta(ctx, d, 0, d.Size, true)
	}
}

func (s *Server) deleteOtaPackage(ctx *fasthttp.RequestCtx, p *engine.Principal) {
	if id, ok := s.pathID(ctx, "otaPackageId"); ok {
		s.done(ctx, s.eng.DeleteOtaPackage(s.ctx, p, id))
	}
}

func (s *Server) otaPackages(ctx *fasthttp.RequestCtx, p *engine.Principal) {
	if pl, ok := pageLink(ctx); ok {
		v, err := s.eng.ListOtaPackages(s.ctx, p, pl, uuid.Nil, "")
		s.respond(ctx, v, err)
	}
}

func (s *Server) profileOtaPackages(ctx *fasthttp.RequestCtx, p *engine.Principal) {
	profileID, ok := s.pathID(ctx, "deviceProfileId")
	if !ok {
		return
	}
	typ, err := engine.ParseOtaType(pathParam(ctx, "type"))
	if err != nil {
		s.fail(ctx, err)
		return
	}
	if pl, ok := pageLink(ctx); ok {
		v, err := s.eng.ListOtaPackages(s.ctx, p, pl, profileID, typ)
		s.respond(ctx, v, err)
	}
}

// deviceOta serves GET /api/v1/{token}/firmware (software): title and version
// required; size and chunk select bytes [size*chunk, size*chunk+size) (a chunk
// past the end is empty). As in ThingsBoard (DeviceApiController binds both
// as Java ints, CaffeineOtaPackageCache.get), a size below 1 is the whole
// package, chunk then unused; there a Range header may select bytes instead.
func (s *Server) deviceOta(typ string) fasthttp.RequestHandler {
	return func(ctx *fasthttp.RequestCtx) {
		dev, ok := s.device(ctx)
		if !ok {
			return
		}
		title, ok := requiredParam(ctx, "title")
		if !ok {
			return
		}
		version, ok := requiredParam(ctx, "version")
		if !ok {
			return
		}
		size, ok := intParam(ctx, "size")
		if !ok {
			return
		}
		chunk, ok := intParam(ctx, "chunk")
		if !ok {
			return
		}
		d, err := s.eng.DeviceOtaPackage(s.ctx, dev, typ, title, version)
		if err != nil {
			s.fail(ctx, err)
			return
		}
		if size < 1 {
			s.sendOta(ctx, d, 0, d.Size, true)
			return
		}
		if chunk < 0 {
			// ThingsBoard fails copying from a negative offset (once it
			// found the package): an error rather than bytes.
			writeError(ctx, fasthttp.StatusBadRequest, engine.CodeBadRequestParams,
				"Parameter 'chunk' must not be negative")
			return
		}
		// A chunk past the end is 200 and empty. Both are within int32, so
		// size*chunk cannot overflow int64 (ThingsBoard's int product may
		// wrap; a device cannot mean that).
		off := min(size*chunk, d.Size)
		s.sendOta(ctx, d, off, min(size, d.Size-off), false)
	}
}

// intParam reads an optional query parameter as Spring binds a Java int:
// absent or empty is 0, and anything but a decimal integer within int32 is
// 400, as ThingsBoard answers a binding failure.
func intParam(ctx *fasthttp.RequestCtx, name string) (int64, bool) {
	raw := ctx.QueryArgs().Peek(name)
	if len(raw) == 0 {
		return 0, true
	}
	n, err := strconv.ParseInt(string(raw), 10, 32)
	if err != nil {
		writeError(ctx, fasthttp.StatusBadRequest, engine.CodeBadRequestParams,
			"Parameter '"+name+"' must be an integer within Java's int range")
		return 0, false
	}
	return n, true
}

// sendOta answers bytes [off, off+n) of a package with ThingsBoard's headers;
// with ranges, a Range header (bytes=a-b, a-, -n) turns it into a 206 of that part
// of the package, or 416 when no byte of it exists. Bytes are read from storage
// as the response is written.
func (s *Server) sendOta(ctx *fasthttp.RequestCtx, d *engine.OtaDownload, off, n int64, ranges bool) {
	name := headerSafe(d.FileName)
	ctx.Response.Header.Set("Content-Disposition", "attachment;filename="+name)
	ctx.Response.Header.Set("x-filename", name)
	ct := d.ContentType
	if !strings.Contains(ct, "/") {
		ct = "application/octet-stream"
	}
	ctx.SetContentType(headerSafe(ct))
	if ranges {
		ctx.Response.Header.Set("Accept-Ranges", "bytes")
		if spec := ctx.Request.Header.Peek("Range"); len(spec) > 0 {
			from, to, ok := parseRange(string(spec), d.Size)
			switch {
			case !ok:
				// A Range that is not one byte range is ignored: the whole package.
			case from >= d.Size || to < from:
				writeError(ctx, fasthttp.StatusRequestedRangeNotSatisfiable, engine.CodeBadRequestParams,
					"Range not satisfiable: the package has "+strconv.FormatInt(d.Size, 10)+" bytes")
				ctx.Response.Header.Set("Content-Range", "bytes */"+strconv.FormatInt(d.Size, 10))
				return
			default:
				off, n = from, to-from+1
				ctx.SetStatusCode(fasthttp.StatusPartialContent)
				ctx.Response.Header.Set("Content-Range", "bytes "+strconv.FormatInt(from, 10)+"-"+
					strconv.FormatInt(to, 10)+"/"+strconv.FormatInt(d.Size, 10))
			}
		}
	}
	if n == 0 {
		ctx.SetBody(nil)
		return
	}
	ctx.SetBodyStream(d.Reader(s.ctx, off, n), int(n))
}

// parseRange reads a single byte range "bytes=a-b", "bytes=a-" or "bytes=-n" of
// a body of size bytes and returns its first and last byte, the last clipped to
// the body. ok is false for anything else (several ranges, other units, bad
// syntax), which is served as if there were no Range. from >= size or to < from
// means unsatisfiable.
func parseRange(spec string, size int64) (from, to int64, ok bool) {
	r, found := strings.CutPrefix(strings.TrimSpace(spec), "bytes=")
	if !found || strings.Contains(r, ",") {
		return 0, 0, false
	}
	a, b, found := strings.Cut(strings.TrimSpace(r), "-")
	if !found {
		return 0, 0, false
	}
	if a == "" { // suffix: the last b bytes
		n, err := strconv.ParseInt(b, 10, 64)
		if err != nil || n < 0 {
			return 0, 0, false
		}
		if n == 0 {
			return size, size, true // unsatisfiable
		}
		return max(size-n, 0), size - 1, true
	}
	from, err := strconv.ParseInt(a, 10, 64)
	if err != nil || from < 0 {
		return 0, 0, false
	}
	if b == "" {
		return from, size - 1, true
	}
	to, err = strconv.ParseInt(b, 10, 64)
	if err != nil || to < from {
		return 0, 0, false
	}
	return from, min(to, size-1), true
}

// headerSafe drops control characters, so an uploaded file name cannot add
// header lines.
func headerSafe(s string) string {
	return strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return -1
		}
		return r
	}, s)
}
