// metal-sim: the MSL keywords as macros. Included LAST by metal_stdlib.h (after every standard header),
// because `thread`, `device`, `kernel`, ... are ordinary identifiers in C++ libraries.
#pragma once

// Address spaces: no-ops on pointers and references. Device buffers are spelled DEVICE_PTR(T) in
// kernels (a checked device_ptr<T> here); threadgroup arrays are declared with MB_THREADGROUP.
#define device
#define thread
#define threadgroup
#define threadgroup_imageblock
#define constant const

// Function qualifiers.
#define kernel
#define vertex
#define fragment

// MSL vector constructors: float4(a.xy, b, c), float4(x) (splat), float4(h4) (conversion).
// A type name followed by `(` is a constructor call; without `(` it is the typedef from types.h.
#define float2(...) ::metal_sim::make_vec<float, 2>(__VA_ARGS__)
#define float3(...) ::metal_sim::make_vec<float, 3>(__VA_ARGS__)
#define float4(...) ::metal_sim::make_vec<float, 4>(__VA_ARGS__)
#define half2(...) ::metal_sim::make_vec<half, 2>(__VA_ARGS__)
#define half3(...) ::metal_sim::make_vec<half, 3>(__VA_ARGS__)
#define half4(...) ::metal_sim::make_vec<half, 4>(__VA_ARGS__)
#define bfloat2(...) ::metal_sim::make_vec<bfloat, 2>(__VA_ARGS__)
#define bfloat3(...) ::metal_sim::make_vec<bfloat, 3>(__VA_ARGS__)
#define bfloat4(...) ::metal_sim::make_vec<bfloat, 4>(__VA_ARGS__)
#define int2(...) ::metal_sim::make_vec<int, 2>(__VA_ARGS__)
#define int3(...) ::metal_sim::make_vec<int, 3>(__VA_ARGS__)
#define int4(...) ::metal_sim::make_vec<int, 4>(__VA_ARGS__)
#define uint2(...) ::metal_sim::make_vec<uint, 2>(__VA_ARGS__)
#define uint3(...) ::metal_sim::make_vec<uint, 3>(__VA_ARGS__)
#define uint4(...) ::metal_sim::make_vec<uint, 4>(__VA_ARGS__)
#define short2(...) ::metal_sim::make_vec<short, 2>(__VA_ARGS__)
#define short3(...) ::metal_sim::make_vec<short, 3>(__VA_ARGS__)
#define short4(...) ::metal_sim::make_vec<short, 4>(__VA_ARGS__)
#define ushort2(...) ::metal_sim::make_vec<ushort, 2>(__VA_ARGS__)
#define ushort3(...) ::metal_sim::make_vec<ushort, 3>(__VA_ARGS__)
#define ushort4(...) ::metal_sim::make_vec<ushort, 4>(__VA_ARGS__)
#define char2(...) ::metal_sim::make_vec<signed char, 2>(__VA_ARGS__)
#define char3(...) ::metal_sim::make_vec<signed char, 3>(__VA_ARGS__)
#define char4(...) ::metal_sim::make_vec<signed char, 4>(__VA_ARGS__)
#define uchar2(...) ::metal_sim::make_vec<uchar, 2>(__VA_ARGS__)
#define uchar3(...) ::metal_sim::make_vec<uchar, 3>(__VA_ARGS__)
#define uchar4(...) ::metal_sim::make_vec<uchar, 4>(__VA_ARGS__)
#define long2(...) ::metal_sim::make_vec<long, 2>(__VA_ARGS__)
#define long3(...) ::metal_sim::make_vec<long, 3>(__VA_ARGS__)
#define long4(...) ::metal_sim::make_vec<long, 4>(__VA_ARGS__)
#define ulong2(...) ::metal_sim::make_vec<ulong, 2>(__VA_ARGS__)
#define ulong3(...) ::metal_sim::make_vec<ulong, 3>(__VA_ARGS__)
#define ulong4(...) ::metal_sim::make_vec<ulong, 4>(__VA_ARGS__)
#define bool2(...) ::metal_sim::make_vec<bool, 2>(__VA_ARGS__)
#define bool3(...) ::metal_sim::make_vec<bool, 3>(__VA_ARGS__)
#define bool4(...) ::metal_sim::make_vec<bool, 4>(__VA_ARGS__)
