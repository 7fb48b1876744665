#include "kernels/vulkan/vk_loader.h"

#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace shoal::vulkan {
namespace {

std::atomic<int> g_validationErrors{0};

VKAPI_ATTR VkBool32 VKAPI_CALL onDebugMessage(VkDebugUtilsMessageSeverityFlagBitsEXT severity,
                                              VkDebugUtilsMessageTypeFlagsEXT,
                                              const VkDebugUtilsMessengerCallbackDataEXT* data,
                                              void*) {
  if (severity & VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT) {
    ++g_validationErrors;
    std::fprintf(stderr, "vulkan validation error: %s\n", data->pMessage);
  } else if (severity & VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT) {
    std::fprintf(stderr, "vulkan validation warning: %s\n", data->pMessage);
  }
  return VK_FALSE;
}

bool envFlag(const char* name) {
  const char* v = std::getenv(name);
  return v && *v && std::strcmp(v, "0") != 0;
}

bool hasLayer(const VkApi& api, const char* name) {
  uint32_t n = 0;
  if (api.vkEnumerateInstanceLayerProperties(&n, nullptr) != VK_SUCCESS) return false;
  std::vector<VkLayerProperties> layers(n);
  if (api.vkEnumerateInstanceLayerProperties(&n, layers.data()) != VK_SUCCESS) return false;
  for (const auto& l : layers)
    if (std::strcmp(l.layerName, name) == 0) return true;
  return false;
}

}  // namespace

int validationErrorCount() { return g_validationErrors.load(); }

std::string resultName(VkResult r) {
  switch (r) {
#define SHOAL_CASE(x) \
  case x:             \
    return #x;
    SHOAL_CASE(VK_SUCCESS)
    SHOAL_CASE(VK_NOT_READY)
    SHOAL_CASE(VK_TIMEOUT)
    SHOAL_CASE(VK_INCOMPLETE)
    SHOAL_CASE(VK_ERROR_OUT_OF_HOST_MEMORY)
    SHOAL_CASE(VK_ERROR_OUT_OF_DEVICE_MEMORY)
    SHOAL_CASE(VK_ERROR_INITIALIZATION_FAILED)
    SHOAL_CASE(VK_ERROR_DEVICE_LOST)
    SHOAL_CASE(VK_ERROR_MEMORY_MAP_FAILED)
    SHOAL_CASE(VK_ERROR_LAYER_NOT_PRESENT)
    SHOAL_CASE(VK_ERROR_EXTENSION_NOT_PRESENT)
    SHOAL_CASE(VK_ERROR_FEATURE_NOT_PRESENT)
    SHOAL_CASE(VK_ERROR_INCOMPATIBLE_DRIVER)
    SHOAL_CASE(VK_ERROR_TOO_MANY_OBJECTS)
    SHOAL_CASE(VK_ERROR_UNKNOWN)
#undef SHOAL_CASE
    default:
      return "VkResult " + std::to_string(static_cast<int>(r));
  }
}

std::shared_ptr<Instance> Instance::create(std::string& reason) {
  std::shared_ptr<Instance> inst(new Instance());
  const char* path = std::getenv("SHOAL_VULKAN_LOADER");
  inst->m_library = dlopen(path && *path ? path : "libvulkan.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!inst->m_library) {
    const char* err = dlerror();
    reason = std::string("Vulkan loader not found (") + (err ? err : "libvulkan.so.1") +
             "); install your GPU's Vulkan driver";
    return nullptr;
  }
  VkApi& api = inst->m_api;
  api.vkGetInstanceProcAddr =
      reinterpret_cast<PFN_vkGetInstanceProcAddr>(dlsym(inst->m_library, "vkGetInstanceProcAddr"));
  if (!api.vkGetInstanceProcAddr) {
    reason = "the Vulkan loader has no vkGetInstanceProcAddr";
    return nullptr;
  }
  auto global = [&](const char* name) { return api.vkGetInstanceProcAddr(nullptr, name); };
  api.vkCreateInstance = reinterpret_cast<PFN_vkCreateInstance>(global("vkCreateInstance"));
  api.vkEnumerateInstanceVersion =
      reinterpret_cast<PFN_vkEnumerateInstanceVersion>(global("vkEnumerateInstanceVersion"));
  api.vkEnumerateInstanceLayerProperties = reinterpret_cast<PFN_vkEnumerateInstanceLayerProperties>(
      global("vkEnumerateInstanceLayerProperties"));
  api.vkEnumerateInstanceExtensionProperties =
      reinterpret_cast<PFN_vkEnumerateInstanceExtensionProperties>(
          global("vkEnumerateInstanceExtensionProperties"));
  uint32_t version = VK_API_VERSION_1_0;
  if (api.vkEnumerateInstanceVersion) api.vkEnumerateInstanceVersion(&version);
  if (!api.vkCreateInstance || version < VK_API_VERSION_1_2) {
    reason = "the Vulkan loader supports only Vulkan " +
             std::to_string(VK_API_VERSION_MAJOR(version)) + "." +
             std::to_string(VK_API_VERSION_MINOR(version)) + " (Shoal needs 1.2)";
    return nullptr;
  }

  const bool wantValidation = envFlag("SHOAL_VULKAN_VALIDATION");
  std::vector<const char*> layers, extensions;
  if (wantValidation) {
    if (hasLayer(api, "VK_LAYER_KHRONOS_validation")) {
      layers.push_back("VK_LAYER_KHRONOS_validation");
      extensions.push_back(VK_EXT_DEBUG_UTILS_EXTENSION_NAME);
    } else {
      std::fprintf(stderr, "SHOAL_VULKAN_VALIDATION: VK_LAYER_KHRONOS_validation not installed\n");
    }
  }
  VkApplicationInfo app{};
  app.sType = VK_STRUCTURE_TYPE_APPLICATION_INFO;
  app.pApplicationName = "Shoal";
  app.pEngineName = "Shoal";
  app.apiVersion = VK_API_VERSION_1_2;
  VkInstanceCreateInfo ci{};
  ci.sType = VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO;
  ci.pApplicationInfo = &app;
  ci.enabledLayerCount = static_cast<uint32_t>(layers.size());
  ci.ppEnabledLayerNames = layers.data();
  ci.enabledExtensionCount = static_cast<uint32_t>(extensions.size());
  ci.ppEnabledExtensionNames = extensions.data();
  const VkResult r = api.vkCreateInstance(&ci, nullptr, &inst->m_instance);
  if (r != VK_SUCCESS) {
    reason = "vkCreateInstance failed: " + resultName(r) +
             (r == VK_ERROR_INCOMPATIBLE_DRIVER ? " (no Vulkan driver (ICD) installed)" : "");
    inst->m_instance = VK_NULL_HANDLE;
    return nullptr;
  }
  auto load = [&](const char* name) { return api.vkGetInstanceProcAddr(inst->m_instance, name); };
#define SHOAL_VK_LOAD(f) api.f = reinterpret_cast<PFN_##f>(load(#f));
  SHOAL_VK_INSTANCE_FUNCS(SHOAL_VK_LOAD)
#undef SHOAL_VK_LOAD
#define SHOAL_VK_CHECK(f)                                             \
  if (!api.f) {                                                       \
    reason = "the Vulkan loader does not provide " + std::string(#f); \
    return nullptr;                                                   \
  }
  SHOAL_VK_INSTANCE_FUNCS(SHOAL_VK_CHECK)
#undef SHOAL_VK_CHECK
  if (!layers.empty()) {
    api.vkCreateDebugUtilsMessengerEXT = reinterpret_cast<PFN_vkCreateDebugUtilsMessengerEXT>(
        load("vkCreateDebugUtilsMessengerEXT"));
    api.vkDestroyDebugUtilsMessengerEXT = reinterpret_cast<PFN_vkDestroyDebugUtilsMessengerEXT>(
        load("vkDestroyDebugUtilsMessengerEXT"));
    if (api.vkCreateDebugUtilsMessengerEXT) {
      VkDebugUtilsMessengerCreateInfoEXT mi{};
      mi.sType = VK_STRUCTURE_TYPE_DEBUG_UTILS_MESSENGER_CREATE_INFO_EXT;
      mi.messageSeverity = VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT |
                           VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT;
      mi.messageType = VK_DEBUG_UTILS_MESSAGE_TYPE_GENERAL_BIT_EXT |
                       VK_DEBUG_UTILS_MESSAGE_TYPE_VALIDATION_BIT_EXT |
                       VK_DEBUG_UTILS_MESSAGE_TYPE_PERFORMANCE_BIT_EXT;
      mi.pfnUserCallback = onDebugMessage;
      api.vkCreateDebugUtilsMessengerEXT(inst->m_instance, &mi, nullptr, &inst->m_messenger);
    }
  }
  return inst;
}

Instance::~Instance() {
  if (m_messenger != VK_NULL_HANDLE && m_api.vkDestroyDebugUtilsMessengerEXT) {
    m_api.vkDestroyDebugUtilsMessengerEXT(m_instance, m_messenger, nullptr);
  }
  if (m_instance != VK_NULL_HANDLE && m_api.vkDestroyInstance) {
    m_api.vkDestroyInstance(m_instance, nullptr);
  }
  if (m_library) dlclose(m_library);
}

void Instance::loadDeviceFunctions(VkDevice device, VkApi& api) const {
  api = m_api;
#define SHOAL_VK_LOAD(f) api.f = reinterpret_cast<PFN_##f>(m_api.vkGetDeviceProcAddr(device, #f));
  SHOAL_VK_DEVICE_FUNCS(SHOAL_VK_LOAD)
#undef SHOAL_VK_LOAD
}

}  // namespace shoal::vulkan
