package deploytest

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/moby/buildkit/client/llb"
	"github.com/moby/buildkit/client/llb/sourceresolver"
	"github.com/moby/buildkit/frontend/dockerfile/dockerfile2llb"
	"github.com/moby/buildkit/frontend/dockerfile/instructions"
	"github.com/moby/buildkit/frontend/dockerfile/parser"
	"github.com/moby/patternmatcher"
	"github.com/moby/patternmatcher/ignorefile"
	digest "github.com/opencontainers/go-digest"
)

// offlineResolver answers BuildKit's base-image lookups without a registry:
// an empty linux/amd64 image config is all the linter needs.
type offlineResolver struct{}

func (offlineResolver) ResolveImageConfig(_ context.Context, ref string, _ sourceresolver.Opt) (string, digest.Digest, []byte, error) {
	return ref, digest.FromString(ref), []byte(`{"architecture":"amd64","os":"linux","config":{}}`), nil
}

// lintDockerfile runs BuildKit's Dockerfile checks (what `docker build
// --check` runs) and returns the parsed stages.
func lintDockerfile(t *testing.T, path string) []instructions.Stage {
	t.Helper()
	dt, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	src := llb.Local("dockerfile")
	def, err := src.Marshal(ctx)
	if err != nil {
		t.Fatal(err)
	}
	smap := llb.NewSourceMap(&src, path, "Dockerfile", dt)
	smap.Definition = def
	res, err := dockerfile2llb.DockerfileLint(ctx, dt, dockerfile2llb.ConvertOpt{SourceMap: smap, MetaResolver: offlineResolver{}})
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if res.Error != nil {
		t.Errorf("%s: %s", path, res.Error.Message)
	}
	for _, w := range res.Warnings {
		line := int32(0)
		if w.Location != nil && len(w.Location.Ranges) > 0 {
			line = w.Location.Ranges[0].Start.Line
		}
		t.Errorf("%s:%d: %s: %s", path, line, w.RuleName, w.Detail)
	}
	ast, err := parser.Parse(strings.NewReader(string(dt)))
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	stages, _, err := instructions.Parse(ast.AST, nil)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	checkCopiesNotIgnored(t, path, stages)
	return stages
}

// checkCopiesNotIgnored fails when a COPY from the build context names a
// path that .dockerignore leaves out of it.
func checkCopiesNotIgnored(t *testing.T, path string, stages []instructions.Stage) {
	t.Helper()
	f, err := os.Open(filepath.Join(root, ".dockerignore"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	patterns, err := ignorefile.ReadAll(f)
	if err != nil {
		t.Fatal(err)
	}
	pm, err := patternmatcher.New(patterns)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range stages {
		for _, c := range s.Commands {
			cp, ok := c.(*instructions.CopyCommand)
			if !ok || cp.From != "" {
				continue
			}
			for _, src := range cp.SourcePaths {
				src = filepath.Clean(src)
				if ignored, err := pm.MatchesOrParentMatches(src); err != nil || ignored {
					t.Errorf("%s: COPY %s: left out of the build context by .dockerignore (%v)", path, src, err)
				}
				if _, err := os.Stat(filepath.Join(root, src)); err != nil {
					t.Errorf("%s: COPY %s: %v", path, src, err)
				}
			}
		}
	}
}

func last(stages []instructions.Stage) instructions.Stage { return stages[len(stages)-1] }

func commandsOf[T instructions.Command](s instructions.Stage) []T {
	var out []T
	for _, c := range s.Commands {
		if v, ok := c.(T); ok {
			out = append(out, v)
		}
	}
	return out
}

func TestProxyDockerfile(t *testing.T) {
	const path = root + "/images/proxy.Dockerfile"
	stages := lintDockerfile(t, path)
	final := last(stages)
	if final.BaseName != "${ISTIO_HUB}/proxyv2:${ISTIO_VERSION}" {
		t.Errorf("final stage FROM %s, want Istio's proxyv2 at ${ISTIO_VERSION}", final.BaseName)
	}
	// pilot-agent stays the ENTRYPOINT: istio-init and istio-validation
	// run the same image with other arguments.
	if n := len(commandsOf[*instructions.EntrypointCommand](final)) + len(commandsOf[*instructions.CmdCommand](final)); n != 0 {
		t.Errorf("final stage sets ENTRYPOINT or CMD; proxyv2's pilot-agent must stay")
	}
	copies := commandsOf[*instructions.CopyCommand](final)
	if len(copies) != 1 || copies[0].DestPath != "/usr/local/bin/proxy-supervisor" {
		t.Errorf("final stage copies %+v, want the binary at /usr/local/bin/proxy-supervisor, where the injection template runs it", copies)
	}
	version := istioVersion(t)
	if !regexp.MustCompile(`^1\.\d+\.\d+$`).MatchString(version) {
		t.Errorf("ARG ISTIO_VERSION=%q, want a release such as 1.31.0", version)
	}
	// The template's default proxy image is the release's, as make image
	// tags it, at the injecting istiod's own Istio version.
	r := theRelease(t)
	values, err := os.ReadFile(istioValues)
	if err != nil {
		t.Fatal(err)
	}
	makefile, err := os.ReadFile(root + "/Makefile")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(values), `printf "`+r.registry+`/proxyv2:%s-`+r.version+`" (toString .Values.global.tag)`) ||
		!strings.Contains(string(makefile), "-t $(REGISTRY)/proxyv2:$(ISTIO_VERSION)-$(TAG) ") {
		t.Errorf("%s's default proxy image is not make image's proxyv2:<Istio's version>-<version>", istioValues)
	}
}

// istioVersion is the default of ARG ISTIO_VERSION, which make image reads.
func istioVersion(t *testing.T) string {
	t.Helper()
	dt, err := os.ReadFile(root + "/images/proxy.Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^ARG ISTIO_VERSION=(\S+)$`).FindSubmatch(dt)
	if m == nil {
		t.Fatal("no ARG ISTIO_VERSION=... line (make image reads it)")
	}
	return string(m[1])
}

// finalStage is the Dockerfile's final stage, once linted, and checked to
// be FROM base.
func finalStage(t *testing.T, path, base, why string) instructions.Stage {
	t.Helper()
	final := last(lintDockerfile(t, path))
	if final.BaseName != base {
		t.Errorf("%s: final stage FROM %s, want %s: %s", path, final.BaseName, base, why)
	}
	return final
}

func TestClientDockerfile(t *testing.T) {
	final := finalStage(t, root+"/images/client.Dockerfile", "scratch", "the static binary alone")
	users := commandsOf[*instructions.UserCommand](final)
	if len(users) != 1 || strings.HasPrefix(users[0].User, "0") || strings.HasPrefix(users[0].User, "root") {
		t.Errorf("USER %+v, want one non-root numeric user", users)
	}
	eps := commandsOf[*instructions.EntrypointCommand](final)
	if len(eps) != 1 || !slices.Equal(eps[0].CmdLine, []string{"/proxy-supervisor"}) {
		t.Errorf("ENTRYPOINT %+v, want [/proxy-supervisor], the path the manifests' install containers run", eps)
	}
}

// The Envoy image is the admission policy's one sidecar container: Envoy's
// own image with the binary where the policy runs it, beside envoy.
func TestEnvoyDockerfile(t *testing.T) {
	final := finalStage(t, root+"/images/envoy.Dockerfile", "${ENVOY_IMAGE}:${ENVOY_VERSION}", "Envoy's image")
	copies := commandsOf[*instructions.CopyCommand](final)
	if len(copies) != 1 || copies[0].DestPath != proxyBinary {
		t.Errorf("final stage copies %+v, want the binary at %s", copies, proxyBinary)
	}
	policy, err := os.ReadFile(root + "/deploy/admission-policy/mutating-policy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"'" + proxyBinary + "', 'supervise'", "'/usr/local/bin/envoy'"} {
		if !strings.Contains(string(policy), want) {
			t.Errorf("the mutating policy does not run %s, where the Envoy image has it", want)
		}
	}
}
