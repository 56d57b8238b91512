// Command kubeapi decodes Kubernetes objects strictly against the API types
// of one Kubernetes release: the one its go.mod names (k8s.io/api). Each
// go.1.NN.mod beside go.mod names another release, and
//
//	go run -modfile=go.1.34.mod . FILE...
//
// decodes against Kubernetes 1.34's. Every YAML document of each FILE (or of
// standard input) must name an apiVersion and kind that release has, and
// hold no field its type lacks; a document that does not is an error line,
// and the exit status is 1. deploytest runs it over the chart's renders.
package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"strings"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	admissionv1alpha1 "k8s.io/api/admissionregistration/v1alpha1"
	admissionv1beta1 "k8s.io/api/admissionregistration/v1beta1"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/yaml"
)

func main() {
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{
		corev1.AddToScheme, appsv1.AddToScheme, batchv1.AddToScheme,
		admissionv1.AddToScheme, admissionv1beta1.AddToScheme, admissionv1alpha1.AddToScheme,
	} {
		if err := add(scheme); err != nil {
			fmt.Fprintln(os.Stderr, "kubeapi:", err)
			os.Exit(2)
		}
	}
	inputs := os.Args[1:]
	if len(inputs) == 0 {
		inputs = []string{"-"}
	}
	failed := false
	for _, in := range inputs {
		docs, err := read(in)
		if err != nil {
			fmt.Fprintln(os.Stderr, "kubeapi:", err)
			os.Exit(2)
		}
		for i, doc := range docs {
			if err := decode(scheme, doc); err != nil {
				fmt.Printf("%s: document %d: %v\n", in, i+1, err)
				failed = true
			}
		}
	}
	if failed {
		os.Exit(1)
	}
}

var separator = regexp.MustCompile(`(?m)^---\s*$`)

// read returns the file's YAML documents that hold more than comments.
func read(name string) ([][]byte, error) {
	var raw []byte
	var err error
	if name == "-" {
		raw, err = io.ReadAll(os.Stdin)
	} else {
		raw, err = os.ReadFile(name)
	}
	if err != nil {
		return nil, err
	}
	var docs [][]byte
	for _, d := range separator.Split(string(raw), -1) {
		for _, line := range strings.Split(d, "\n") {
			if t := strings.TrimSpace(line); t != "" && !strings.HasPrefix(t, "#") {
				docs = append(docs, []byte(d))
				break
			}
		}
	}
	return docs, nil
}

// decode decodes one document strictly into the type its apiVersion and
// kind name in this release.
func decode(scheme *runtime.Scheme, doc []byte) error {
	var meta metav1.TypeMeta
	if err := yaml.Unmarshal(doc, &meta); err != nil {
		return err
	}
	if meta.APIVersion == "" || meta.Kind == "" {
		return errors.New("no apiVersion or kind")
	}
	gvk := meta.GroupVersionKind()
	obj, err := scheme.New(gvk)
	if err != nil {
		return fmt.Errorf("%s %s: not in this release's API", meta.APIVersion, meta.Kind)
	}
	if err := yaml.UnmarshalStrict(bytes.TrimSpace(doc), obj); err != nil {
		return fmt.Errorf("%s %s: %w", meta.APIVersion, meta.Kind, err)
	}
	return nil
}
