package sessions

import (
	"net/url"
	"sync"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/conversion"
	"k8s.io/apimachinery/pkg/runtime"
)

// decodePodLogOptions decodes a pods/log query as the API server does: its
// log handler decodes PodLogOptions with the core group's ParameterCodec and
// answers 400 when that fails.
func decodePodLogOptions(q url.Values) (corev1.PodLogOptions, error) {
	var opts corev1.PodLogOptions
	err := podLogCodec().DecodeParameters(q, corev1.SchemeGroupVersion, &opts)
	return opts, err
}

// podLogCodec is a ParameterCodec over a scheme that knows only
// PodLogOptions. The API server's conversion from url.Values is generated
// into k8s.io/kubernetes (pkg/apis/core/v1/zz_generated.conversion.go),
// which a library cannot import; convertURLValuesToPodLogOptions is that
// function, field by field, over the same apimachinery converters.
var podLogCodec = sync.OnceValue(func() runtime.ParameterCodec {
	s := runtime.NewScheme()
	s.AddKnownTypes(corev1.SchemeGroupVersion, &corev1.PodLogOptions{})
	err := s.AddGeneratedConversionFunc((*url.Values)(nil), (*corev1.PodLogOptions)(nil), func(a, b any, scope conversion.Scope) error {
		return convertURLValuesToPodLogOptions(a.(*url.Values), b.(*corev1.PodLogOptions), scope)
	})
	if err != nil {
		panic("register PodLogOptions conversion: " + err.Error()) // a programming error, caught by every test
	}
	return runtime.NewParameterCodec(s)
})

// convertURLValuesToPodLogOptions is autoConvert_url_Values_To_v1_PodLogOptions
// of k8s.io/kubernetes v1.37: each key's first value, converted by the
// converter of its field's type; an absent key leaves the zero value.
func convertURLValuesToPodLogOptions(in *url.Values, out *corev1.PodLogOptions, s conversion.Scope) error {
	q := map[string][]string(*in)
	str := func(key string, dst *string) error {
		if v, ok := q[key]; ok && len(v) > 0 {
			return runtime.Convert_Slice_string_To_string(&v, dst, s)
		}
		*dst = ""
		return nil
	}
	boolean := func(key string, dst *bool) error {
		if v, ok := q[key]; ok && len(v) > 0 {
			return runtime.Convert_Slice_string_To_bool(&v, dst, s)
		}
		*dst = false
		return nil
	}
	int64p := func(key string, dst **int64) error {
		if v, ok := q[key]; ok && len(v) > 0 {
			return runtime.Convert_Slice_string_To_Pointer_int64(&v, dst, s)
		}
		*dst = nil
		return nil
	}
	timep := func(key string, dst **metav1.Time) error {
		if v, ok := q[key]; ok && len(v) > 0 {
			return metav1.Convert_Slice_string_To_Pointer_v1_Time(&v, dst, s)
		}
		*dst = nil
		return nil
	}
	stringp := func(key string, dst **string) error {
		if v, ok := q[key]; ok && len(v) > 0 {
			val := v[0]
			*dst = &val
			return nil
		}
		*dst = nil
		return nil
	}
	for _, err := range []error{
		str("container", &out.Container),
		boolean("follow", &out.Follow),
		boolean("previous", &out.Previous),
		int64p("sinceSeconds", &out.SinceSeconds),
		timep("sinceTime", &out.SinceTime),
		boolean("timestamps", &out.Timestamps),
		int64p("tailLines", &out.TailLines),
		int64p("limitBytes", &out.LimitBytes),
		boolean("insecureSkipTLSVerifyBackend", &out.InsecureSkipTLSVerifyBackend),
		stringp("stream", &out.Stream),
	} {
		if err != nil {
			return err
		}
	}
	return nil
}
