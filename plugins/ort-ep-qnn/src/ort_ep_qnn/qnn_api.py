"""cffi declarations (ABI mode) of the part of Qualcomm's QNN C API this provider calls, and its constants.

Written for this plugin from Qualcomm's public QNN API reference (the QNN SDK documentation of
QnnInterface, QnnTypes, QnnBackend, QnnDevice, QnnContext, QnnGraph, QnnTensor, QnnLog, QnnProfile,
QnnError and the HTP backend's QnnHtpDevice / QnnHtpGraph pages); no Qualcomm header is copied or
shipped. ABI mode checks nothing against the headers, and QNN's struct layouts and its interface
table have changed between API versions (the scalar union gained 8-byte members, the HTP device
config union a pointer, the tensor union a v2), so these declarations hold only for the versions in
``VERIFIED_API``; ``runtime`` refuses any other before calling anything but the version query.
Nothing here loads a library or decides what to compile.
"""

from __future__ import annotations

CDEF = """
typedef uint64_t Qnn_ErrorHandle_t;
typedef void* Qnn_BackendHandle_t;
typedef void* Qnn_DeviceHandle_t;
typedef void* Qnn_ContextHandle_t;
typedef void* Qnn_GraphHandle_t;
typedef void* Qnn_LogHandle_t;
typedef void* Qnn_ProfileHandle_t;
typedef void* Qnn_SignalHandle_t;
typedef void* Qnn_MemHandle_t;

typedef struct { uint32_t major; uint32_t minor; uint32_t patch; } Qnn_Version_t;
typedef struct { Qnn_Version_t coreApiVersion; Qnn_Version_t backendApiVersion; } Qnn_ApiVersion_t;

/* a scalar: the data type code, then the value in a union that also holds 8-byte members */
typedef struct {
  uint32_t dataType;
  union { float floatValue; double doubleValue; uint64_t uint64Value; int64_t int64Value;
          uint32_t uint32Value; int32_t int32Value; uint8_t bool8Value; const char* stringValue; };
} Qnn_Scalar_t;

typedef struct { float scale; int32_t offset; } Qnn_ScaleOffset_t;
typedef struct { int32_t axis; uint32_t numScaleOffsets; Qnn_ScaleOffset_t* scaleOffset; } Qnn_AxisScaleOffset_t;
/* the widest member of the encoding union (bitwidth, axis, count, scales, offsets) fixes its size */
typedef struct { uint32_t bitwidth; int32_t axis; uint32_t numElements; float* scales; int32_t* offsets; }
  Qnn_BwAxisScaleOffset_t;
typedef struct {
  uint32_t encodingDefinition;
  uint32_t quantizationEncoding;
  union { Qnn_ScaleOffset_t scaleOffsetEncoding; Qnn_AxisScaleOffset_t axisScaleOffsetEncoding;
          Qnn_BwAxisScaleOffset_t bwAxisScaleOffsetEncoding; void* encodingPointer; };
} Qnn_QuantizeParams_t;

typedef struct { void* data; uint32_t dataSize; } Qnn_ClientBuffer_t;

typedef struct {
  uint32_t id;
  const char* name;
  uint32_t type;
  uint32_t dataFormat;
  uint32_t dataType;
  Qnn_QuantizeParams_t quantizeParams;
  uint32_t rank;
  uint32_t* dimensions;
  uint32_t memType;
  union { Qnn_ClientBuffer_t clientBuf; Qnn_MemHandle_t memHandle; };
} Qnn_TensorV1_t;

typedef struct {
  uint32_t type;
  union { struct { uint32_t numSpecifiedElements; uint32_t numSparseDimensions; } hybridCoo; };
} Qnn_SparseParams_t;

/* declared so that Qnn_Tensor_t has the library's size: arrays of tensors are strided by it */
typedef struct {
  uint32_t id;
  const char* name;
  uint32_t type;
  uint32_t dataFormat;
  uint32_t dataType;
  Qnn_QuantizeParams_t quantizeParams;
  uint32_t rank;
  uint32_t* dimensions;
  uint32_t memType;
  union { Qnn_ClientBuffer_t clientBuf; Qnn_MemHandle_t memHandle; void* retrieveRaw; };
  uint8_t* isDynamicDimensions;
  Qnn_SparseParams_t sparseParams;
  uint8_t isProduced;
} Qnn_TensorV2_t;

typedef struct { uint32_t version; union { Qnn_TensorV1_t v1; Qnn_TensorV2_t v2; }; } Qnn_Tensor_t;

typedef struct {
  uint32_t paramType;
  const char* name;
  union { Qnn_Scalar_t scalarParam; Qnn_Tensor_t tensorParam; };
} Qnn_Param_t;

typedef struct {
  const char* name;
  const char* packageName;
  const char* typeName;
  uint32_t numOfParams;
  Qnn_Param_t* params;
  uint32_t numOfInputs;
  Qnn_Tensor_t* inputTensors;
  uint32_t numOfOutputs;
  Qnn_Tensor_t* outputTensors;
} Qnn_OpConfigV1_t;

/* QNN declares the v1 member inside a one-member union; cffi passes structs by value only without
   anonymous unions, and a plain member has the same layout */
typedef struct { uint32_t version; Qnn_OpConfigV1_t v1; } Qnn_OpConfig_t;

typedef struct { uint32_t option; union { void* customConfig; void* hardwareInfo; }; } QnnDevice_Config_t;
typedef struct {
  uint32_t option;
  union { uint32_t socModel; struct { uint32_t deviceId; uint32_t arch; } arch; void* htpExtension; };
} QnnHtpDevice_CustomConfig_t;

typedef struct { uint32_t option; union { void* customConfig; uint32_t priority; void* profileHandle; }; }
  QnnGraph_Config_t;
typedef struct {
  uint32_t option;
  union { struct { uint32_t type; float floatValue; } optimizationOption; uint32_t precision;
          uint32_t vtcmSizeInMB; uint64_t numHvxThreads; void* reserved; uint8_t reservedBytes[64]; };
} QnnHtpGraph_CustomConfig_t;

typedef struct { uint32_t type; uint32_t unit; uint64_t value; const char* identifier; } QnnProfile_EventData_t;

/* the last argument is a va_list, which on the platforms QNN ships for is passed as a pointer */
typedef void (*QnnLog_Callback_t)(const char* fmt, uint32_t level, uint64_t timestamp, void* args);

/* QNN_INTERFACE_VER_TYPE: the function table, in the order of the API's interface struct; entries this
   provider never calls are kept as void* so that the ones it calls sit at their offsets */
typedef struct {
  Qnn_ErrorHandle_t (*propertyHasCapability)(uint32_t key);
  Qnn_ErrorHandle_t (*backendCreate)(Qnn_LogHandle_t logger, const void** config, Qnn_BackendHandle_t* backend);
  void* backendSetConfig;
  Qnn_ErrorHandle_t (*backendGetApiVersion)(Qnn_ApiVersion_t* version);
  Qnn_ErrorHandle_t (*backendGetBuildId)(const char** id);
  void* backendRegisterOpPackage;
  void* backendGetSupportedOperations;
  Qnn_ErrorHandle_t (*backendValidateOpConfig)(Qnn_BackendHandle_t backend, Qnn_OpConfig_t opConfig);
  Qnn_ErrorHandle_t (*backendFree)(Qnn_BackendHandle_t backend);
  Qnn_ErrorHandle_t (*contextCreate)(Qnn_BackendHandle_t backend, Qnn_DeviceHandle_t device, const void** config,
                                     Qnn_ContextHandle_t* context);
  void* contextSetConfig;
  Qnn_ErrorHandle_t (*contextGetBinarySize)(Qnn_ContextHandle_t context, uint64_t* size);
  Qnn_ErrorHandle_t (*contextGetBinary)(Qnn_ContextHandle_t context, void* buffer, uint64_t size, uint64_t* written);
  Qnn_ErrorHandle_t (*contextCreateFromBinary)(Qnn_BackendHandle_t backend, Qnn_DeviceHandle_t device,
                                               const void** config, const void* buffer, uint64_t size,
                                               Qnn_ContextHandle_t* context, Qnn_ProfileHandle_t profile);
  Qnn_ErrorHandle_t (*contextFree)(Qnn_ContextHandle_t context, Qnn_ProfileHandle_t profile);
  Qnn_ErrorHandle_t (*graphCreate)(Qnn_ContextHandle_t context, const char* name, const QnnGraph_Config_t** config,
                                   Qnn_GraphHandle_t* graph);
  void* graphCreateSubgraph;
  void* graphSetConfig;
  Qnn_ErrorHandle_t (*graphAddNode)(Qnn_GraphHandle_t graph, Qnn_OpConfig_t opConfig);
  Qnn_ErrorHandle_t (*graphFinalize)(Qnn_GraphHandle_t graph, Qnn_ProfileHandle_t profile, Qnn_SignalHandle_t signal);
  Qnn_ErrorHandle_t (*graphRetrieve)(Qnn_ContextHandle_t context, const char* name, Qnn_GraphHandle_t* graph);
  Qnn_ErrorHandle_t (*graphExecute)(Qnn_GraphHandle_t graph, const Qnn_Tensor_t* inputs, uint32_t numInputs,
                                    Qnn_Tensor_t* outputs, uint32_t numOutputs, Qnn_ProfileHandle_t profile,
                                    Qnn_SignalHandle_t signal);
  void* graphExecuteAsync;
  void* tensorCreateContextTensor;
  Qnn_ErrorHandle_t (*tensorCreateGraphTensor)(Qnn_GraphHandle_t graph, Qnn_Tensor_t* tensor);
  Qnn_ErrorHandle_t (*logCreate)(QnnLog_Callback_t callback, uint32_t maxLevel, Qnn_LogHandle_t* logger);
  Qnn_ErrorHandle_t (*logSetLogLevel)(Qnn_LogHandle_t logger, uint32_t maxLevel);
  Qnn_ErrorHandle_t (*logFree)(Qnn_LogHandle_t logger);
  Qnn_ErrorHandle_t (*profileCreate)(Qnn_BackendHandle_t backend, uint32_t level, Qnn_ProfileHandle_t* profile);
  void* profileSetConfig;
  Qnn_ErrorHandle_t (*profileGetEvents)(Qnn_ProfileHandle_t profile, const uint64_t** events, uint32_t* count);
  Qnn_ErrorHandle_t (*profileGetSubEvents)(uint64_t event, const uint64_t** events, uint32_t* count);
  Qnn_ErrorHandle_t (*profileGetEventData)(uint64_t event, QnnProfile_EventData_t* data);
  void* profileGetExtendedEventData;
  Qnn_ErrorHandle_t (*profileFree)(Qnn_ProfileHandle_t profile);
  void* memRegister;
  void* memDeRegister;
  void* deviceGetPlatformInfo;
  void* deviceFreePlatformInfo;
  Qnn_ErrorHandle_t (*deviceGetInfrastructure)(void** infrastructure);
  Qnn_ErrorHandle_t (*deviceCreate)(Qnn_LogHandle_t logger, const QnnDevice_Config_t** config,
                                    Qnn_DeviceHandle_t* device);
  void* deviceSetConfig;
  void* deviceGetInfo;
  Qnn_ErrorHandle_t (*deviceFree)(Qnn_DeviceHandle_t device);
  void* signalCreate;
  void* signalSetConfig;
  void* signalTrigger;
  void* signalFree;
  Qnn_ErrorHandle_t (*errorGetMessage)(Qnn_ErrorHandle_t error, const char** message);
} QnnInterfaceTable;

/* the HTP backend's performance infrastructure (QnnHtpPerfInfrastructure / QnnHtpDevice): power votes. A DCVS v3
   vote is sixteen 32-bit fields; the other members of the config union are single 32-bit values */
typedef struct {
  uint32_t contextId;
  uint32_t setDcvsEnable; uint32_t dcvsEnable;
  uint32_t powerMode;
  uint32_t setSleepLatency; uint32_t sleepLatency;
  uint32_t setSleepDisable; uint32_t sleepDisable;
  uint32_t setBusParams; uint32_t busVoltageCornerMin; uint32_t busVoltageCornerTarget; uint32_t busVoltageCornerMax;
  uint32_t setCoreParams; uint32_t coreVoltageCornerMin; uint32_t coreVoltageCornerTarget;
  uint32_t coreVoltageCornerMax;
} QnnHtpPerf_DcvsV3_t;
typedef struct {
  uint32_t option;
  union { QnnHtpPerf_DcvsV3_t dcvsV3Config; uint32_t rpcControlLatencyConfig; uint32_t rpcPollingTimeConfig;
          uint32_t hmxTimeoutIntervalUsConfig; };
} QnnHtpPerf_PowerConfig_t;
typedef struct {
  Qnn_ErrorHandle_t (*createPowerConfigId)(uint32_t deviceId, uint32_t coreId, uint32_t* powerConfigId);
  Qnn_ErrorHandle_t (*destroyPowerConfigId)(uint32_t powerConfigId);
  Qnn_ErrorHandle_t (*setPowerConfig)(uint32_t powerConfigId, const QnnHtpPerf_PowerConfig_t** config);
  void* setMemoryConfig;
} QnnHtpDevice_PerfInfrastructure_t;
/* what deviceGetInfrastructure points to on the HTP backend: its type, then (pointer-aligned) the table */
typedef struct { uint32_t infraType; QnnHtpDevice_PerfInfrastructure_t perfInfra; } QnnHtpDevice_Infrastructure_t;

/* QnnInterface_t: which backend, its name and API versions, then the table */
typedef struct {
  uint32_t backendId;
  const char* providerName;
  Qnn_ApiVersion_t apiVersion;
  QnnInterfaceTable api;
} QnnInterface_t;

Qnn_ErrorHandle_t QnnInterface_getProviders(const QnnInterface_t*** providerList, uint32_t* numProviders);
"""

SYSTEM_CDEF = """
/* libQnnSystem: reading a serialized context's graphs and their input and output tensors back */
typedef void* QnnSystemContext_Handle_t;

/* QnnSystemInterface_t: the system library's id, name and API version, then its function table */
typedef struct {
  uint32_t backendId;
  const char* providerName;
  Qnn_Version_t systemApiVersion;
  Qnn_ErrorHandle_t (*systemContextCreate)(QnnSystemContext_Handle_t* handle);
  Qnn_ErrorHandle_t (*systemContextGetBinaryInfo)(QnnSystemContext_Handle_t handle, void* buffer, uint64_t size,
                                                  const void** info, uint64_t* infoSize);
  void* systemContextGetMetaData;
  Qnn_ErrorHandle_t (*systemContextFree)(QnnSystemContext_Handle_t handle);
} QnnSystemInterface_t;

Qnn_ErrorHandle_t QnnSystemInterface_getProviders(const QnnSystemInterface_t*** providerList, uint32_t* numProviders);

/* QnnSystemContext_BinaryInfo_t: the version, then (in a union aligned for pointers) the fields of version 3
   read here; the version is checked before they are */
typedef struct {
  uint32_t backendId;
  const char* buildId;
  Qnn_Version_t coreApiVersion;
  Qnn_Version_t backendApiVersion;
  const char* reserved0;
  Qnn_Version_t contextBlobVersion;
  uint64_t reserved1;
  uint32_t numContextTensors;
  Qnn_Tensor_t* contextTensors;
  uint32_t numGraphs;
  void* graphs;
} QnnSystemContext_BinaryInfoV3Head_t;
typedef struct { uint32_t version; QnnSystemContext_BinaryInfoV3Head_t v3; } QnnSystemContext_BinaryInfoHead_t;

/* one entry of the graphs array: every graph-info version starts with these fields; version 3 entries are
   SYSTEM_GRAPH_INFO_STRIDE bytes apart */
typedef struct {
  const char* graphName;
  uint32_t numGraphInputs;
  Qnn_Tensor_t* graphInputs;
  uint32_t numGraphOutputs;
  Qnn_Tensor_t* graphOutputs;
} QnnSystemContext_GraphInfoFields_t;
typedef struct { uint32_t version; QnnSystemContext_GraphInfoFields_t info; } QnnSystemContext_GraphInfoHead_t;
"""
"""Declarations of the system library (``libQnnSystem``), kept apart: it has its own API version."""

LIBC_CDEF = """
int vsnprintf(char* str, size_t size, const char* format, void* args);
int fflush(void* stream);
"""
"""libc calls: formatting the backend's log messages (printf-style with a va_list) and flushing C stdio."""

# Versions these declarations were checked against (QnnInterface_getProviders' answer): core API
# (major, minor), and per backend id the backend API (major, minor). The QNN SDK 2.51 libraries of
# onnxruntime-qnn 2.7 report core 2.40 and HTP 5.51.
VERIFIED_CORE_API = ((2, 40),)
BACKEND_HTP = 6
VERIFIED_BACKEND_API = {BACKEND_HTP: ((5, 51),)}
BACKEND_NAMES = {1: "reference", 2: "saver", 3: "CPU", 4: "GPU", 5: "DSP", 6: "HTP", 8: "HTA", 15: "LPAI"}

SUCCESS = 0

# libQnnSystem: the system API version and the binary-info layouts these declarations were checked against
VERIFIED_SYSTEM_API = ((1, 15),)
SYSTEM_BINARY_INFO_VERSIONS = (3,)
SYSTEM_GRAPH_INFO_VERSIONS = (3,)
SYSTEM_GRAPH_INFO_STRIDE = 88  # bytes from one QnnSystemContext_GraphInfo_t to the next (version 3)


def error_code(status: int) -> int:
    """The error code of a Qnn_ErrorHandle_t (its low 16 bits; the rest is backend-specific)."""
    return int(status) & 0xFFFF


# Qnn_DataType_t
FLOAT_32 = 0x0232
FLOAT_16 = 0x0216
UINT_32 = 0x0132
INT_32 = 0x0032
BOOL_8 = 0x0508

# quantized data types (fixed point: real = scale * (q + offset))
UFIXED_POINT_8 = 0x0408
UFIXED_POINT_16 = 0x0416
SFIXED_POINT_8 = 0x0308
SFIXED_POINT_16 = 0x0316
SFIXED_POINT_32 = 0x0332
UINT_8 = 0x0108
INT_8 = 0x0008

# Qnn_TensorType_t
TENSOR_APP_WRITE = 0
TENSOR_APP_READ = 1
TENSOR_NATIVE = 3
TENSOR_STATIC = 4

TENSOR_VERSION_1 = 1
OPCONFIG_VERSION_1 = 1
DATA_FORMAT_DENSE = 0
MEMTYPE_RAW = 0
UNDEFINED = 0x7FFFFFFF  # the enums' "undefined" value (quantization definition and encoding here)

# Qnn_Definition_t and Qnn_QuantizationEncoding_t
DEFINITION_DEFINED = 1
ENCODING_SCALE_OFFSET = 0
ENCODING_AXIS_SCALE_OFFSET = 1

# Qnn_ParamType_t
PARAM_SCALAR = 0
PARAM_TENSOR = 1

# QnnDevice_ConfigOption_t / QnnHtpDevice_ConfigOption_t
DEVICE_CONFIG_CUSTOM = 0
HTP_DEVICE_CONFIG_SOC = 0
HTP_DEVICE_CONFIG_ARCH = 1

# QnnHtpDevice_InfrastructureType_t, QnnHtpPerfInfrastructure_PowerConfigOption_t and PowerMode_t
HTP_INFRASTRUCTURE_PERF = 0
POWER_CONFIG_DCVS_V3 = 1
POWER_MODE_POWER_SAVER = 0x4
POWER_MODE_PERFORMANCE = 0x10

# QnnHtpPerfInfrastructure_VoltageCorner_t
VCORNER_DISABLE = 0x10
VCORNER_SVS2 = 0x30
VCORNER_SVS = 0x40
VCORNER_SVS_PLUS = 0x50
VCORNER_NOM = 0x60
VCORNER_NOM_PLUS = 0x70
VCORNER_TURBO = 0x80
VCORNER_MAX = 0xA0

# QnnGraph_ConfigOption_t / QnnHtpGraph_ConfigOption_t / Qnn_Precision_t
GRAPH_CONFIG_CUSTOM = 0
HTP_GRAPH_CONFIG_PRECISION = 2
PRECISION_FLOAT32 = 0
PRECISION_FLOAT16 = 1

# QnnLog_Level_t
LOG_ERROR, LOG_WARN, LOG_INFO, LOG_VERBOSE, LOG_DEBUG = 1, 2, 3, 4, 5

# QnnProfile_Level_t and event units
PROFILE_BASIC = 1
PROFILE_DETAILED = 2
EVENT_UNITS = {1: "us", 2: "bytes", 3: "cycles", 4: "count"}

OP_PACKAGE = "qti.aisw"
"""The package of QNN's built-in operations."""
