// Shared declarations of every Shoal compute shader. Buffers are passed as device addresses in
// push constants (GL_EXT_buffer_reference), so no kernel needs descriptor sets.
#extension GL_EXT_buffer_reference : require
#extension GL_EXT_shader_8bit_storage : require
#extension GL_EXT_shader_16bit_storage : require
#extension GL_EXT_shader_explicit_arithmetic_types_int8 : require
#extension GL_EXT_shader_explicit_arithmetic_types_int16 : require
#extension GL_KHR_shader_subgroup_arithmetic : enable

layout(buffer_reference, std430, buffer_reference_align = 4) buffer Floats { float v[]; };
layout(buffer_reference, std430, buffer_reference_align = 4) buffer Ints { int v[]; };
layout(buffer_reference, std430, buffer_reference_align = 1) readonly buffer Bytes { uint8_t v[]; };
layout(buffer_reference, std430, buffer_reference_align = 1) readonly buffer SBytes { int8_t v[]; };
layout(buffer_reference, std430, buffer_reference_align = 2) buffer Halves { uint16_t v[]; };
layout(buffer_reference, std430, buffer_reference_align = 2) buffer F16s { float16_t v[]; };

// Workgroup size: specialization constant 0 of every kernel.
layout(local_size_x_id = 0) in;
